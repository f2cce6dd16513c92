package sim_test

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

const qwen = "Qwen/Qwen3-4B-Instruct-2507"

// noHubCache keeps the sim's subprocesses from reading this machine's
// Hugging Face cache: the table is what tells them Qwen's context.
func noHubCache(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", t.TempDir())
}

// Served without --max-model-len, Qwen3-4B-Instruct-2507 asks for its
// config's 262,144 tokens, which the default profile's 45,872 KV tokens
// cannot hold: the sim refuses to start as vLLM does.
func TestModelContextBeyondKVFailsLikeVLLM(t *testing.T) {
	noHubCache(t)
	p := simproc.StartNoWait(t, "--model", qwen)
	if code := waitExit(t, p); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := "ValueError: To serve at least one request with the model's max seq len (262144), (36.00 GiB KV cache is needed, " +
		"which is larger than the available KV cache memory (6.30 GiB). Based on the available memory, the estimated maximum model length is 45872."
	if out := p.Output(); !strings.Contains(out, want) || !strings.Contains(out, "Using max model len 262144") {
		t.Errorf("output lacks vLLM's lines %q:\n%s", want, out)
	}
}

// --max-model-len auto fits the KV cache and says so in vLLM's words;
// /v1/models reports the length in force (the null block off, as for any
// --max-model-len the size of the cache); human-readable values are taken.
func TestMaxModelLenAutoAndHumanReadable(t *testing.T) {
	noHubCache(t)
	cases := []struct {
		args []string
		want int64
		log  string
	}{
		{[]string{"--model", qwen, "--max-model-len", "auto"}, 45856,
			"Auto-fit max_model_len: reduced from 262144 to 45872 to fit in available KV cache memory (6.3 GiB GPU)"},
		{[]string{"--model", qwen, "--max-model-len", "-1", "--sim-kv-tokens", "300000"}, 262144,
			"Auto-fit max_model_len: full model context length 262144 fits in available KV cache memory (41.2 GiB GPU)"},
		{[]string{"--model", qwen, "--max-model-len", "25.6k"}, 25600, "Using max model len 25600"},
		{[]string{"--model", qwen, "--max-model-len", "32K"}, 32768, "Using max model len 32768"},
		{nil, 45856, "max_model_len defaults to the KV capacity"}, // test-model: unknown, as before
	}
	for _, tc := range cases {
		p := simproc.Start(t, tc.args...)
		_, r := get(t, p.URL+"/v1/models")
		if got := r.Get("data.0.max_model_len").Int(); got != tc.want || !strings.Contains(p.Output(), tc.log) {
			t.Errorf("%q: /v1/models max_model_len %d, want %d; log lacks %q:\n%s", tc.args, got, tc.want, tc.log, p.Output())
		}
		p.Kill()
	}
}

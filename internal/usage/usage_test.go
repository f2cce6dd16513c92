package usage

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestParseAnthropic(t *testing.T) {
	for _, tc := range []struct {
		name, json     string
		prompt, cached uint64
		hasCached      bool
	}{
		// Captured from vLLM 0.32.0 (CPU build) serving a 666-token prompt.
		{"vLLM 0.32 first turn: a cache write", `{"input_tokens":26,"output_tokens":8,"cache_creation_input_tokens":640,"cache_read_input_tokens":0}`, 666, 0, true},
		{"vLLM 0.32 second turn: a cache read", `{"input_tokens":26,"output_tokens":8,"cache_creation_input_tokens":0,"cache_read_input_tokens":640}`, 666, 640, true},
		{"vLLM 0.32 message_start", `{"input_tokens":666,"output_tokens":0}`, 666, 0, false},
		{"uncached part larger than the read", `{"input_tokens":700,"cache_creation_input_tokens":0,"cache_read_input_tokens":640}`, 1340, 640, true},
		{"no cache writes reported, read > input", `{"input_tokens":20,"cache_read_input_tokens":160}`, 180, 160, true},
		{"older vLLM: input_tokens is the whole prompt", `{"input_tokens":200,"cache_read_input_tokens":160}`, 200, 160, true},
	} {
		a := ParseAnthropic(gjson.Parse(tc.json))
		if a.Prompt != tc.prompt || a.Cached != tc.cached || a.HasCached != tc.hasCached || !a.HasPrompt {
			t.Errorf("%s: %+v, want prompt %d cached %d (has %v)", tc.name, a, tc.prompt, tc.cached, tc.hasCached)
		}
	}
	if a := ParseAnthropic(gjson.Parse(`{"output_tokens":7}`)); a.HasPrompt || a.Output != 7 || !a.HasOutput {
		t.Errorf("message_delta with output only: %+v", a)
	}
}

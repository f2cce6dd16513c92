package tap

import (
	"strings"
	"testing"
)

// TestPassStripsTheUsageChunkAcrossPieces: an answer fed in pieces that
// cut events anywhere comes out whole but for the usage-only chunk, whose
// usage is read.
func TestPassStripsTheUsageChunkAcrossPieces(t *testing.T) {
	answer := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n" +
		"data: [DONE]\n\n"
	want := strings.Replace(answer, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n", "", 1)
	for _, size := range []int{1, 5, 17, len(answer)} {
		tp := New(nil, OpenAI, Options{Stream: true, Strip: true})
		var got strings.Builder
		for i := 0; i < len(answer); i += size {
			end := min(i+size, len(answer))
			got.Write(tp.Pass([]byte(answer[i:end]), end == len(answer)))
		}
		if got.String() != want {
			t.Errorf("pieces of %d: handed on %q, want %q", size, got.String(), want)
		}
		if u := tp.Usage(); u.Prompt != 7 || u.Completion != 2 {
			t.Errorf("pieces of %d: usage %+v, want 7 and 2", size, u)
		}
	}
	plain := New(nil, OpenAI, Options{Stream: true})
	if got := string(plain.Pass([]byte(answer), true)); got != answer {
		t.Errorf("without strip: %q, want the answer unchanged", got)
	}
}

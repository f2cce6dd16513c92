package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTokenizeDeterministicAndDense(t *testing.T) {
	a, b := Tokenize(english), Tokenize(english)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same text, different tokens:\n%s", diff)
	}
	ratio := float64(len(english)) / float64(len(a))
	if ratio < 3 || ratio > 5 {
		t.Errorf("%.2f chars per token, want about 4", ratio)
	}
	if Tokenize("") == nil && len(Tokenize("")) != 0 {
		t.Error("empty text has tokens")
	}
}

func TestTokenizeSplitsAtSpecialTokens(t *testing.T) {
	parts := []string{imStart + "user\n" + english, imEnd + "\n", imStart + "assistant\n", "hello world"}
	var want []uint32
	for _, p := range parts {
		want = append(want, Tokenize(p)...)
	}
	if diff := cmp.Diff(want, Tokenize(strings.Join(parts, ""))); diff != "" {
		t.Errorf("tokenize(concat) != concat(tokenize) at special boundaries:\n%s", diff)
	}
}

func TestGeneratedTextRetokenizes(t *testing.T) {
	g := newGenerator()
	var ids []uint32
	var text strings.Builder
	for i := 0; i < 200; i++ {
		id, piece := g.token(12345, i)
		ids = append(ids, id)
		text.WriteString(piece)
	}
	if diff := cmp.Diff(ids, Tokenize(text.String())); diff != "" {
		t.Errorf("generated text does not re-tokenize to the generated ids:\n%s", diff)
	}
	// And inside the template, where the assistant turn is replayed.
	prompt := RenderChat([]Turn{{"user", "hi"}}, nil)
	replay := RenderChat([]Turn{{"user", "hi"}, {"assistant", text.String()}, {"user", "more"}}, nil)
	want := append(Tokenize(prompt), ids...)
	got := Tokenize(replay)[:len(want)]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replayed conversation does not start with prompt+output tokens:\n%s", diff)
	}
}

func TestTemplateConversationGrowsByPrefix(t *testing.T) {
	turns := []Turn{{"system", "You are helpful."}, {"user", english}}
	short := Tokenize(RenderChat(turns, []string{`{"name":"bash"}`}))
	long := Tokenize(RenderChat(append(turns, Turn{"assistant", "ok then"}, Turn{"user", "next"}), []string{`{"name":"bash"}`}))
	// the generation prompt of the short one is the start of the assistant turn
	if diff := cmp.Diff(short, long[:len(short)]); diff != "" {
		t.Errorf("longer conversation does not extend the shorter one's tokens:\n%s", diff)
	}
}

// TokenPieces gives Tokenize's ids and pieces that concatenate to the text.
func TestTokenPieces(t *testing.T) {
	for _, text := range []string{"", "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls -la  ./...\"}}\n</tool_call>",
		"<|im_start|>assistant\nhello   world<|im_end|>\n", "naïve café 東京 tabs\t\tand\r\nlines"} {
		ids, pieces := TokenPieces(text)
		if !slices.Equal(ids, Tokenize(text)) || strings.Join(pieces, "") != text || len(ids) != len(pieces) {
			t.Errorf("TokenPieces(%q) = %v %q, want Tokenize's ids %v and pieces joining to the text", text, ids, pieces, Tokenize(text))
		}
	}
}

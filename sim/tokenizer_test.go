package sim

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const english = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April, " +
	"and the clocks were striking thirteen. Call me Ishmael; some years ago, never mind how long precisely."

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
	prompt := renderChat([]turn{{"user", "hi"}}, nil)
	replay := renderChat([]turn{{"user", "hi"}, {"assistant", text.String()}, {"user", "more"}}, nil)
	want := append(Tokenize(prompt), ids...)
	got := Tokenize(replay)[:len(want)]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replayed conversation does not start with prompt+output tokens:\n%s", diff)
	}
}

func TestTemplateConversationGrowsByPrefix(t *testing.T) {
	turns := []turn{{"system", "You are helpful."}, {"user", english}}
	short := Tokenize(renderChat(turns, []string{`{"name":"bash"}`}))
	long := Tokenize(renderChat(append(turns, turn{"assistant", "ok then"}, turn{"user", "next"}), []string{`{"name":"bash"}`}))
	// the generation prompt of the short one is the start of the assistant turn
	if diff := cmp.Diff(short, long[:len(short)]); diff != "" {
		t.Errorf("longer conversation does not extend the shorter one's tokens:\n%s", diff)
	}
}

// tokenPieces gives Tokenize's ids and pieces that concatenate to the text.
func TestTokenPieces(t *testing.T) {
	for _, text := range []string{"", "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls -la  ./...\"}}\n</tool_call>",
		"<|im_start|>assistant\nhello   world<|im_end|>\n", "naïve café 東京 tabs\t\tand\r\nlines"} {
		ids, pieces := tokenPieces(text)
		if !slices.Equal(ids, Tokenize(text)) || strings.Join(pieces, "") != text || len(ids) != len(pieces) {
			t.Errorf("tokenPieces(%q) = %v %q, want Tokenize's ids %v and pieces joining to the text", text, ids, pieces, Tokenize(text))
		}
	}
}

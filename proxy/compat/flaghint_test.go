package compat

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router/tap"
)

// vLLM 0.32.0's refusals of tools without a parser, as its CPU build sent
// them (OpenAI shape on chat completions, Anthropic shape on messages).
const (
	openAIToolsRefused    = `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`
	anthropicToolsRefused = `{"type":"error","error":{"type":"BadRequestError","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}}`
)

// roundTrip sends body through a Transport with hints to an engine that
// answers status and answer.
func roundTrip(t *testing.T, hints FlagHints, path string, kind tap.Kind, status int, answer string) (*http.Response, string) {
	t.Helper()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	defer engine.Close()
	tr := &Transport{Next: http.DefaultTransport, Clients: New(slog.New(slog.NewTextHandler(io.Discard, nil))), Hints: hints}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	req, err := http.NewRequestWithContext(WithRequest(context.Background(), body, kind), http.MethodPost, engine.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

func TestToolRefusalNamesTheWardenFlag(t *testing.T) {
	fix := "the warden found no tool-call parser for this model: restart it with --tools PARSER"
	for _, c := range []struct {
		name, path, answer string
		kind               tap.Kind
		hints              FlagHints
		want               string
	}{
		{"chat, serve's own fix", "/v1/chat/completions", openAIToolsRefused, tap.OpenAI,
			FlagHints{Launched: true, ToolsFix: fix}, "(warden: " + fix + ")"},
		{"messages, serve's own fix", "/v1/messages", anthropicToolsRefused, tap.Anthropic,
			FlagHints{Launched: true, ToolsFix: fix}, "(warden: " + fix + ")"},
		{"route: the engines are not the warden's", "/v1/chat/completions", openAIToolsRefused, tap.OpenAI,
			FlagHints{}, "`warden serve` sets them itself, with --tools)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, out := roundTrip(t, c.hints, c.path, c.kind, 400, c.answer)
			msg := gjson.Get(out, "error.message").Str
			if resp.StatusCode != 400 || !gjson.Valid(out) || !strings.HasPrefix(msg, `"auto" tool choice requires`) ||
				!strings.HasSuffix(msg, c.want) {
				t.Fatalf("%d %s: message %q, want vLLM's then %q", resp.StatusCode, out, msg, c.want)
			}
			if n, _ := strconv.Atoi(resp.Header.Get("Content-Length")); n != len(out) {
				t.Errorf("Content-Length %d for %d bytes", n, len(out))
			}
			// Everything but the message is the engine's.
			orig := gjson.Parse(c.answer).Map()
			for k, v := range gjson.Parse(out).Map() {
				if k != "error" && v.Raw != orig[k].Raw {
					t.Errorf("field %s changed: %s -> %s", k, orig[k].Raw, v.Raw)
				}
			}
			if gjson.Get(out, "error.type").Str != "BadRequestError" {
				t.Errorf("error type lost: %s", out)
			}
		})
	}
}

func TestFlagHintsLeaveOtherErrorsAlone(t *testing.T) {
	for _, c := range []struct {
		status int
		answer string
	}{
		{400, `{"error":{"message":"messages must be an array","type":"BadRequestError","param":null,"code":400}}`},
		{500, openAIToolsRefused},
		{400, `not json --enable-auto-tool-choice`},
	} {
		resp, out := roundTrip(t, FlagHints{Launched: true}, "/v1/chat/completions", tap.OpenAI, c.status, c.answer)
		if resp.StatusCode != c.status || out != c.answer {
			t.Errorf("%d %s became %d %s", c.status, c.answer, resp.StatusCode, out)
		}
	}
}

func TestFlagHintsSentences(t *testing.T) {
	for _, c := range []struct {
		msg   string
		hints FlagHints
		want  string
	}{
		{"Set max_logprobs (--max-logprobs) to at least 30.", FlagHints{Launched: true}, "`warden serve ... -- --max-logprobs ...`"},
		{"Chat template is passed with request, but --trust-request-chat-template is not set.", FlagHints{},
			"--trust-request-chat-template is a flag of each `vllm serve`"},
		{"needs --reasoning-parser", FlagHints{Launched: true}, "--reasoning PARSER"},
		{"no flag here", FlagHints{Launched: true}, ""},
	} {
		if got := c.hints.Sentence(c.msg); !strings.Contains(got, c.want) || (c.want == "") != (got == "") {
			t.Errorf("Sentence(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}

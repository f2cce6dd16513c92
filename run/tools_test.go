package run

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// toolsWarden is a fake warden whose status reports engines (nil: a
// `warden route`, which says nothing of them) and whose engines answer a
// chat request with chat (status code and body); probes get the bodies of
// the chat requests it received.
func toolsWarden(t *testing.T, engines map[string]any, chatStatus int, chatBody string, probes *[]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/warden/status":
			st := map[string]any{"model": "m", "replicas": []any{}}
			if engines != nil {
				st["engines"] = engines
			}
			_ = json.NewEncoder(w).Encode(st)
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","max_model_len":8192}]}`)
		case "/v1/chat/completions":
			b, _ := io.ReadAll(r.Body)
			*probes = append(*probes, string(b))
			w.WriteHeader(chatStatus)
			_, _ = io.WriteString(w, chatBody)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRunChecksToolsFirst: an agent is not started against engines that
// refuse its tool calls; the one line says why and what to change.
func TestRunChecksToolsFirst(t *testing.T) {
	refused := `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`
	for _, c := range []struct {
		name       string
		engines    map[string]any
		chatStatus int
		code       int
		stderr     string
		probed     bool
	}{
		{"serve: tools on", map[string]any{"auto_tool_choice": true, "tool_call_parser": "hermes"}, 200, 0,
			"tools on (--tool-call-parser hermes)", false},
		{"serve: tools off", map[string]any{"auto_tool_choice": false, "tools": "tool calling off (--tools off)",
			"tools_fix": "restart it without --tools off"}, 200, 1,
			"refuse tool calls, which Claude Code sends on every request (tool calling off (--tools off)): restart it without --tools off", false},
		{"route: the probe is refused", nil, 400, 1,
			"start each engine with --enable-auto-tool-choice --tool-call-parser PARSER", true},
		{"route: the probe is answered", nil, 200, 0, "tools on (a probe with tool_choice auto was answered)", true},
		{"route: the probe cannot tell", nil, 500, 0, "model m, max_model_len 8192\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var probes []string
			body := `{"choices":[]}`
			if c.chatStatus == 400 {
				body = refused
			}
			srv := toolsWarden(t, c.engines, c.chatStatus, body, &probes)
			ran := filepath.Join(t.TempDir(), "ran")
			code, _, stderr := runMain(t, "claude", Options{URL: srv.URL, AgentBin: fakeAgent(t, "touch "+ran)})
			if code != c.code || !strings.Contains(stderr, c.stderr) {
				t.Errorf("code %d, stderr:\n%s\nwant code %d and %q", code, stderr, c.code, c.stderr)
			}
			if _, err := os.Stat(ran); (err == nil) != (c.code == 0) {
				t.Errorf("agent started: %v, want %v", err == nil, c.code == 0)
			}
			if (len(probes) > 0) != c.probed {
				t.Fatalf("probes %q, want probed %v", probes, c.probed)
			}
			if c.probed {
				p := gjson.Parse(probes[0])
				if p.Get("tool_choice").Str != "auto" || p.Get("max_tokens").Int() != 1 || !p.Get("tools.0.function.name").Exists() ||
					p.Get("model").Str != "m" {
					t.Errorf("probe %s", probes[0])
				}
			}
		})
	}
}

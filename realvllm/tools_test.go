package realvllm_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/usage"
)

// The tool every call below forces. The tiny model's text is random, so the
// call is forced: a named tool_choice, and "strict" with an enum for its one
// argument, so that vLLM's guided decoding leaves one valid call. The JSON
// grammar allows whitespace between tokens, which greedy decoding of this
// model picks forever; sampled with a fixed seed, the call closes within a
// few dozen tokens, the same ones every run.
const (
	toolSchema = `{"type":"object","properties":{"city":{"type":"string","enum":["Paris"]}},"required":["city"],"additionalProperties":false}`
	toolName   = "get_weather"
	toolLimit  = `,"temperature":1,"seed":7`
)

// toolAPI is one of vLLM's three APIs as an agent uses tools on it.
type toolAPI struct {
	name, path string
	// first is turn 1 (a forced call, stream or not); next is turn 2 with
	// the call and its result sent back and tool_choice "auto".
	first func(stream bool) string
	next  func(callID, args string) string
	// call reads the tool call out of a whole or streamed answer.
	call func(t *testing.T, body string, stream bool) (id, name, args string)
	// usage reads prompt and cached tokens of a whole answer.
	usage func(body string) (prompt, cached int64)
}

func streamFlag(stream bool) string { return `,"stream":` + strconv.FormatBool(stream) }

var toolAPIs = []toolAPI{
	{
		name: "chat completions", path: "/v1/chat/completions",
		first: func(stream bool) string {
			return `{"model":"` + served + `","max_tokens":400` + toolLimit + streamFlag(stream) +
				`,"messages":[{"role":"system","content":` + strconv.Quote(system) + `},{"role":"user","content":"weather in Paris?"}]` +
				`,"tools":[{"type":"function","function":{"name":"` + toolName + `","strict":true,"parameters":` + toolSchema + `}}]` +
				`,"tool_choice":{"type":"function","function":{"name":"` + toolName + `"}}}`
		},
		next: func(id, args string) string {
			return `{"model":"` + served + `","max_tokens":8` + toolLimit +
				`,"messages":[{"role":"system","content":` + strconv.Quote(system) + `},{"role":"user","content":"weather in Paris?"},` +
				`{"role":"assistant","content":"","tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"` + toolName + `","arguments":` + strconv.Quote(args) + `}}]},` +
				`{"role":"tool","tool_call_id":"` + id + `","content":"sunny, 21 C"}]` +
				`,"tools":[{"type":"function","function":{"name":"` + toolName + `","strict":true,"parameters":` + toolSchema + `}}],"tool_choice":"auto"}`
		},
		call: func(t *testing.T, body string, stream bool) (string, string, string) {
			if !stream {
				tc := gjson.Get(body, "choices.0.message.tool_calls.0")
				return tc.Get("id").Str, tc.Get("function.name").Str, tc.Get("function.arguments").Str
			}
			var id, name string
			var args strings.Builder
			for _, d := range sseData(body) {
				for _, tc := range gjson.Get(d, "choices.0.delta.tool_calls").Array() {
					if v := tc.Get("id").Str; v != "" {
						id = v
					}
					if v := tc.Get("function.name").Str; v != "" {
						name = v
					}
					args.WriteString(tc.Get("function.arguments").Str)
				}
			}
			return id, name, args.String()
		},
		usage: func(body string) (int64, int64) {
			return gjson.Get(body, "usage.prompt_tokens").Int(), gjson.Get(body, "usage.prompt_tokens_details.cached_tokens").Int()
		},
	},
	{
		name: "anthropic messages", path: "/v1/messages",
		first: func(stream bool) string {
			return `{"model":"` + served + `","max_tokens":400` + toolLimit + streamFlag(stream) + `,"system":` + strconv.Quote(system) +
				`,"messages":[{"role":"user","content":"weather in Paris?"}]` +
				`,"tools":[{"name":"` + toolName + `","strict":true,"input_schema":` + toolSchema + `}]` +
				`,"tool_choice":{"type":"tool","name":"` + toolName + `"}}`
		},
		next: func(id, args string) string {
			return `{"model":"` + served + `","max_tokens":8` + toolLimit + `,"system":` + strconv.Quote(system) +
				`,"messages":[{"role":"user","content":"weather in Paris?"},` +
				`{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"` + toolName + `","input":` + args + `}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"sunny, 21 C"}]}]` +
				`,"tools":[{"name":"` + toolName + `","strict":true,"input_schema":` + toolSchema + `}]}`
		},
		call: func(t *testing.T, body string, stream bool) (string, string, string) {
			if !stream {
				if gjson.Get(body, "stop_reason").Str != "tool_use" {
					t.Errorf("stop_reason %q, want tool_use", gjson.Get(body, "stop_reason").Str)
				}
				b := gjson.Get(body, "content.0")
				if b.Get("type").Str != "tool_use" {
					return "", "", ""
				}
				return b.Get("id").Str, b.Get("name").Str, b.Get("input").Raw
			}
			var id, name string
			var args strings.Builder
			for _, d := range sseData(body) {
				switch gjson.Get(d, "type").Str {
				case "content_block_start":
					if b := gjson.Get(d, "content_block"); b.Get("type").Str == "tool_use" {
						id, name = b.Get("id").Str, b.Get("name").Str
					}
				case "content_block_delta":
					args.WriteString(gjson.Get(d, "delta.partial_json").Str)
				}
			}
			return id, name, args.String()
		},
		usage: func(body string) (int64, int64) {
			u := usage.ParseAnthropic(gjson.Get(body, "usage"))
			return int64(u.Prompt), int64(u.Cached)
		},
	},
	{
		name: "responses", path: "/v1/responses",
		first: func(stream bool) string {
			return `{"model":"` + served + `","max_output_tokens":400` + toolLimit + streamFlag(stream) + `,"instructions":` + strconv.Quote(system) +
				`,"input":"weather in Paris?"` +
				`,"tools":[{"type":"function","name":"` + toolName + `","strict":true,"parameters":` + toolSchema + `}]` +
				`,"tool_choice":{"type":"function","name":"` + toolName + `"}}`
		},
		next: func(id, args string) string {
			return `{"model":"` + served + `","max_output_tokens":8` + toolLimit + `,"instructions":` + strconv.Quote(system) +
				`,"input":[{"role":"user","content":"weather in Paris?"},` +
				`{"type":"function_call","call_id":"` + id + `","name":"` + toolName + `","arguments":` + strconv.Quote(args) + `},` +
				`{"type":"function_call_output","call_id":"` + id + `","output":"sunny, 21 C"}]` +
				`,"tools":[{"type":"function","name":"` + toolName + `","strict":true,"parameters":` + toolSchema + `}],"tool_choice":"auto"}`
		},
		call: func(t *testing.T, body string, stream bool) (string, string, string) {
			item := gjson.Result{}
			if !stream {
				for _, it := range gjson.Get(body, "output").Array() {
					if it.Get("type").Str == "function_call" {
						item = it
					}
				}
			} else {
				for _, d := range sseData(body) {
					if gjson.Get(d, "type").Str == "response.output_item.done" && gjson.Get(d, "item.type").Str == "function_call" {
						item = gjson.Get(d, "item")
					}
				}
			}
			return item.Get("call_id").Str, item.Get("name").Str, item.Get("arguments").Str
		},
		usage: func(body string) (int64, int64) {
			return gjson.Get(body, "usage.input_tokens").Int(), gjson.Get(body, "usage.input_tokens_details.cached_tokens").Int()
		},
	},
}

// toolCalls is run by TestServeCPU: the warden started its engines with no
// tool flags after --, so tool calling must be on from the tiny model's
// chat template (it renders hermes-style <tool_call> blocks); a forced call
// comes back as a tool call on all three APIs, streamed and not, and the
// tool's result sent back continues the conversation on the same replica,
// served mostly from its cache.
func toolCalls(t *testing.T, w *warden) {
	eng := jsonGet(get(t, w.url+"/warden/status"), "engines")
	if !eng.Get("auto_tool_choice").Bool() || eng.Get("tool_call_parser").Str != "hermes" {
		t.Fatalf("status engines %s: want auto tool choice with the hermes parser", eng.Raw)
	}
	if !strings.Contains(w.stderr.String(), "--tool-call-parser hermes") || !strings.Contains(w.stderr.String(), "chat template") {
		t.Errorf("the start log does not say which parser was chosen and why:\n%s", tail(w.stderr.String(), 3000))
	}
	for i, api := range toolAPIs {
		for _, stream := range []bool{false, true} {
			t.Run(api.name+" stream="+strconv.FormatBool(stream), func(t *testing.T) {
				sid := "tools-" + strconv.Itoa(i) + "-" + strconv.FormatBool(stream)
				resp, out := post(t, w.url+api.path, api.first(stream), "X-Session-Id", sid, "anthropic-version", "2023-06-01")
				if resp.StatusCode != 200 {
					t.Fatalf("turn 1: %s %s", resp.Status, tail(out, 800))
				}
				home := rankOf(t, resp)
				id, name, args := api.call(t, out, stream)
				var parsed map[string]any
				if id == "" || name != toolName || json.Unmarshal([]byte(args), &parsed) != nil || parsed["city"] != "Paris" {
					t.Fatalf("turn 1: call id %q name %q arguments %q, want %s({\"city\": \"Paris\"}):\n%s", id, name, args, toolName, tail(out, 1500))
				}
				resp, out = post(t, w.url+api.path, api.next(id, args), "X-Session-Id", sid, "anthropic-version", "2023-06-01")
				if resp.StatusCode != 200 {
					t.Fatalf("turn 2 with the tool's result: %s %s", resp.Status, tail(out, 800))
				}
				if rankOf(t, resp) != home || resp.Header.Get("X-Warden-Route") != "sticky" {
					t.Errorf("turn 2 on replica %d (%s), want %d sticky", rankOf(t, resp), resp.Header.Get("X-Warden-Route"), home)
				}
				if prompt, cached := api.usage(out); cached < prompt/2 {
					t.Errorf("turn 2: %d of %d prompt tokens cached, want most", cached, prompt)
				}
			})
		}
	}
}

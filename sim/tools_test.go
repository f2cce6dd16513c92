package sim_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/sim/model"
)

// The tools of /tmp/exp/probe.sh, the requests the vLLM 0.32.0 fixtures
// answer, in each API's shape.
var (
	weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}
	chatWeather   = []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "weather", "parameters": weatherSchema}}}
	msgWeather    = []any{map[string]any{"name": "get_weather", "description": "weather", "input_schema": weatherSchema}}
	respWeather   = []any{map[string]any{"type": "function", "name": "get_weather", "description": "weather", "parameters": weatherSchema}}
)

func chatToolBody(choice any, stream bool) map[string]any {
	b := map[string]any{"model": "test-model", "max_tokens": 8, "messages": []any{msg("user", "weather?")}, "tools": chatWeather}
	if choice != nil {
		b["tool_choice"] = choice
	}
	if stream {
		b["stream"] = true
	}
	return b
}

func msgToolBody(choice any, stream bool) map[string]any {
	b := map[string]any{"model": "test-model", "max_tokens": 8, "messages": []any{msg("user", "weather?")}, "tools": msgWeather}
	if choice != nil {
		b["tool_choice"] = choice
	}
	if stream {
		b["stream"] = true
	}
	return b
}

func rawPost(t *testing.T, url string, body any) (int, string) {
	t.Helper()
	resp := postRaw(t, url, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// Without a tool parser, chat completions and Messages refuse every tool
// choice but none with vLLM 0.32.0's status and body, streamed requests
// too (/tmp/exp/notools.out); Responses answers in text.
func TestToolChoiceRefusedWithoutParser(t *testing.T) {
	const (
		chatAuto     = `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`
		chatNamed    = `{"error":{"message":"tool_choice=function \"get_weather\" requires --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`
		chatRequired = `{"error":{"message":"tool_choice=\"required\" requires --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`
		msgAuto      = `{"type":"error","error":{"type":"BadRequestError","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}}`
		msgNamed     = `{"type":"error","error":{"type":"BadRequestError","message":"tool_choice=function \"get_weather\" requires --tool-call-parser to be set"}}`
		msgRequired  = `{"type":"error","error":{"type":"BadRequestError","message":"tool_choice=\"required\" requires --tool-call-parser to be set"}}`
	)
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	cases := []struct {
		name, path string
		body       any
		code       int
		want       string // the whole body for a refusal
	}{
		{"chat auto", "/v1/chat/completions", chatToolBody("auto", false), 400, chatAuto},
		{"chat tools, no choice", "/v1/chat/completions", chatToolBody(nil, false), 400, chatAuto},
		{"chat named", "/v1/chat/completions", chatToolBody(named, false), 400, chatNamed},
		{"chat required", "/v1/chat/completions", chatToolBody("required", false), 400, chatRequired},
		{"chat stream auto", "/v1/chat/completions", chatToolBody("auto", true), 400, chatAuto},
		{"chat none", "/v1/chat/completions", chatToolBody("none", false), 200, ""},
		{"messages tools, no choice", "/v1/messages", msgToolBody(nil, false), 400, msgAuto},
		{"messages stream", "/v1/messages", msgToolBody(nil, true), 400, msgAuto},
		{"messages auto", "/v1/messages", msgToolBody(map[string]any{"type": "auto"}, false), 400, msgAuto},
		{"messages named", "/v1/messages", msgToolBody(map[string]any{"type": "tool", "name": "get_weather"}, false), 400, msgNamed},
		{"messages any", "/v1/messages", msgToolBody(map[string]any{"type": "any"}, false), 400, msgRequired},
		{"messages none", "/v1/messages", msgToolBody(map[string]any{"type": "none"}, false), 200, ""},
		{"responses named", "/v1/responses", map[string]any{"model": "test-model", "max_output_tokens": 8, "input": "weather?",
			"tools": respWeather, "tool_choice": map[string]any{"type": "function", "name": "get_weather"}}, 200, ""},
	}
	p := simproc.Start(t, "--sim-time-scale", fast)
	for _, tc := range cases {
		code, body := rawPost(t, p.URL+tc.path, tc.body)
		if code != tc.code || (tc.want != "" && body != tc.want) {
			t.Errorf("%s: %d %s\nwant %d %s", tc.name, code, body, tc.code, tc.want)
		}
		if tc.path == "/v1/responses" && gjson.Get(body, "output.0.type").String() != "message" {
			t.Errorf("%s: %s, want a text message as vLLM 0.32 answers without a parser", tc.name, body)
		}
	}
	// --tool-call-parser without --enable-auto-tool-choice is no parser to
	// vLLM (it builds one only with both): a named choice is still refused.
	p = simproc.Start(t, "--sim-time-scale", fast, "--tool-call-parser", "hermes")
	if code, body := rawPost(t, p.URL+"/v1/chat/completions", chatToolBody(named, false)); code != 400 || body != chatNamed {
		t.Errorf("--tool-call-parser alone, named choice: %d %s, want 400 %s", code, body, chatNamed)
	}
}

// vLLM 0.32.0's start-up refusals of the tool and reasoning parser flags,
// as its last traceback line (printed by vLLM 0.32.0's CPU build), exit 1.
func TestParserFlagsRefusedAtStartup(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--enable-auto-tool-choice"}, "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"},
		{[]string{"--enable-auto-tool-choice", "--tool-call-parser", "bogus"},
			"KeyError: 'invalid tool call parser: bogus (chose from { apertus,cohere_command3,cohere_command4,deepseek_v3,deepseek_v31," +
				"deepseek_v32,deepseek_v4,deepseek_v41,dots,ernie45,functiongemma,gemma4,gigachat3,glm45,glm47,granite,granite-20b-fc,granite4," +
				"hermes,hf,hunyuan_a13b,hy_v3,hy_v4,inkling,internlm,jamba,k2_horizon,kimi_k2,kimi_k3,lfm2,ling3,llama3_json,llama4_json," +
				"llama4_pythonic,longcat,mimo,minicpm5,minimax_m2,minimax_m3,mistral,muse_glimmer,olmo3,openai,phi4_mini_json,plamo3," +
				"poolside_v1,pythonic,qwen3_coder,qwen3_json,qwen3_xml,seed_oss,step3,step3p5,xlam })'"},
		{[]string{"--reasoning-parser", "bogus2"},
			`KeyError: "Reasoning parser 'bogus2' not found. Available parsers: cohere_command3, cohere_command4, deepseek_r1, ` +
				"deepseek_v3, deepseek_v4, deepseek_v41, ernie45, gemma4, glm45, glm47, granite, granite_thinking_parser, hf, holo2, " +
				"hunyuan_a13b, hy_v3, hy_v4, inkling, k2_horizon, kimi_k2, kimi_k3, ling3, mimo, minicpmv, minimax_m2, " +
				"minimax_m2_append_think, minimax_m3, mistral, muse_glimmer, nemotron_v3, olmo3, openai_gptoss, plamo3, poolside_v1, " +
				`qwen3, seed_oss, step3, step3p5"`},
	}
	for _, tc := range cases {
		p := simproc.StartNoWait(t, tc.args...)
		if code := waitExit(t, p); code != 1 {
			t.Errorf("%q: exit code %d, want 1", tc.args, code)
		}
		if !strings.Contains(p.Output(), "\n"+tc.want+"\n") && !strings.HasPrefix(p.Output(), tc.want+"\n") {
			t.Errorf("%q: output lacks the line\n%s\n---\n%s", tc.args, tc.want, p.Output())
		}
	}
}

// The parameter schema of the tool the call tests force, and the arguments
// the sim builds from it: every required property in the order of
// properties (Go marshals a map's keys sorted), optional ones left out.
var (
	callSchema = map[string]any{"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string", "enum": []any{"Paris", "Oslo"}},
			"note": map[string]any{"type": "string"},
			"days": map[string]any{"type": "integer"},
			"opts": map[string]any{"type": "object", "properties": map[string]any{"metric": map[string]any{"type": "boolean"}, "x": map[string]any{"type": "number"}},
				"required": []any{"metric"}},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		},
		"required": []any{"city", "days", "opts", "tags", "note"}}
	callArgs = `{"city": "Paris", "days": 0, "note": "sim", "opts": {"metric": false}, "tags": []}`
	callText = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + callArgs + "}\n</tool_call>"
)

// With --enable-auto-tool-choice and a parser, a named (or required) tool
// choice is a tool call in vLLM 0.32.0's shapes (/tmp/exp/tools2.out) on all
// three APIs, streamed and not, its arguments built from the schema and its
// usage the tokens of the call as the sim's template renders it.
func TestToolCalls(t *testing.T) {
	p := simproc.Start(t, append(toolFlags, "--sim-time-scale", fast)...)
	wantTokens := int64(model.CountTokens(callText))
	chatTools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "other", "parameters": weatherSchema}},
		map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": callSchema}}}
	msgTools := []any{map[string]any{"name": "get_weather", "input_schema": callSchema}, map[string]any{"name": "other", "input_schema": weatherSchema}}
	respTools := []any{map[string]any{"type": "function", "name": "get_weather", "parameters": callSchema}}
	base := func(tools, choice any, stream bool) map[string]any {
		return map[string]any{"model": "test-model", "max_tokens": 200, "max_output_tokens": 200, "messages": []any{msg("user", "weather?")},
			"input": "weather?", "tools": tools, "tool_choice": choice, "stream": stream}
	}

	t.Run("chat", func(t *testing.T) {
		named := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
		code, r := post(t, p.URL+"/v1/chat/completions", base(chatTools, named, false))
		m := r.Get("choices.0.message")
		if code != 200 || m.Get("content").String() != "" || !m.Get("content").Exists() || r.Get("choices.0.finish_reason").String() != "stop" ||
			m.Get("tool_calls.#").Int() != 1 || !strings.HasPrefix(m.Get("tool_calls.0.id").String(), "chatcmpl-tool-") ||
			m.Get("tool_calls.0.type").String() != "function" || m.Get("tool_calls.0.function.name").String() != "get_weather" ||
			m.Get("tool_calls.0.function.arguments").String() != callArgs || r.Get("usage.completion_tokens").Int() != wantTokens {
			t.Errorf("chat named: %d %s\nwant the call with arguments %s and %d completion tokens", code, r.Raw, callArgs, wantTokens)
		}
		evs := readAllEvents(t, postRaw(t, p.URL+"/v1/chat/completions", base(chatTools, named, true)))
		if len(evs) < 5 {
			t.Fatalf("chat named stream: %d events", len(evs))
		}
		var args string
		for _, ev := range evs[2 : len(evs)-2] {
			args += ev.data.Get("choices.0.delta.tool_calls.0.function.arguments").String()
			if ev.data.Get("choices.0.delta.tool_calls.0.function.name").Exists() || !ev.data.Get("choices.0.delta.content").Exists() {
				t.Errorf("argument chunk %s", ev.raw)
			}
		}
		first, call, fin := evs[0].data.Get("choices.0"), evs[1].data.Get("choices.0.delta"), evs[len(evs)-2].data.Get("choices.0")
		if first.Get("delta.role").String() != "assistant" || call.Get("tool_calls.0.function.name").String() != "get_weather" ||
			!strings.HasPrefix(call.Get("tool_calls.0.id").String(), "chatcmpl-tool-") || call.Get("tool_calls.0.index").Int() != 0 ||
			args != callArgs || fin.Get("finish_reason").String() != "stop" || fin.Get("delta").Raw != "{}" || evs[len(evs)-1].raw != "[DONE]" {
			t.Errorf("chat named stream: role %s, call %s, arguments %q, finish %s", first.Raw, call.Raw, args, fin.Raw)
		}
		code, r = post(t, p.URL+"/v1/chat/completions", base(chatTools, "required", false))
		if code != 200 || r.Get("choices.0.message.tool_calls.0.function.name").String() != "other" ||
			r.Get("choices.0.message.tool_calls.0.function.arguments").String() != `{"city": "sim"}` {
			t.Errorf("chat required: %d %s, want the first tool called", code, r.Raw)
		}
		code, r = post(t, p.URL+"/v1/chat/completions", base(chatTools, "auto", false))
		if code != 200 || r.Get("choices.0.message.tool_calls.#").Int() != 0 || r.Get("choices.0.message.content").String() == "" {
			t.Errorf("chat auto with a parser: %d %s, want a text answer", code, r.Raw)
		}
	})

	t.Run("messages", func(t *testing.T) {
		named := map[string]any{"type": "tool", "name": "get_weather"}
		code, r := post(t, p.URL+"/v1/messages", base(msgTools, named, false))
		if code != 200 || r.Get("content.#").Int() != 1 || r.Get("content.0.type").String() != "tool_use" ||
			!strings.HasPrefix(r.Get("content.0.id").String(), "chatcmpl-tool-") || r.Get("content.0.name").String() != "get_weather" ||
			!jsonEqual(r.Get("content.0.input").Raw, callArgs) || r.Get("stop_reason").String() != "tool_use" ||
			r.Get("usage.output_tokens").Int() != wantTokens {
			t.Errorf("messages named: %d %s", code, r.Raw)
		}
		evs := readAllEvents(t, postRaw(t, p.URL+"/v1/messages", base(msgTools, named, true)))
		var names []string
		var partial string
		for _, ev := range evs {
			if len(names) == 0 || names[len(names)-1] != ev.name {
				names = append(names, ev.name)
			}
			if ev.name == "content_block_delta" {
				if ev.data.Get("delta.type").String() != "input_json_delta" {
					t.Errorf("delta %s, want input_json_delta", ev.raw)
				}
				partial += ev.data.Get("delta.partial_json").String()
			}
		}
		want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("event sequence (-want +got):\n%s", diff)
		}
		start, delta := evs[1].data.Get("content_block"), evs[len(evs)-2].data
		if start.Get("type").String() != "tool_use" || start.Get("name").String() != "get_weather" || start.Get("input").Raw != "{}" ||
			partial != callArgs || delta.Get("delta.stop_reason").String() != "tool_use" || delta.Get("usage.output_tokens").Int() != wantTokens {
			t.Errorf("messages named stream: block %s, input %q, delta %s", start.Raw, partial, delta.Raw)
		}
		code, r = post(t, p.URL+"/v1/messages", base(msgTools, map[string]any{"type": "any"}, false))
		if code != 200 || r.Get("content.0.name").String() != "get_weather" {
			t.Errorf("messages any: %d %s, want the first tool called", code, r.Raw)
		}
	})

	t.Run("responses", func(t *testing.T) {
		named := map[string]any{"type": "function", "name": "get_weather"}
		code, r := post(t, p.URL+"/v1/responses", base(respTools, named, false))
		out := r.Get("output.0")
		if code != 200 || r.Get("output.#").Int() != 1 || out.Get("type").String() != "function_call" || out.Get("name").String() != "get_weather" ||
			out.Get("arguments").String() != callArgs || !strings.HasPrefix(out.Get("id").String(), "fc_") ||
			!strings.HasPrefix(out.Get("call_id").String(), "chatcmpl-tool-") || out.Get("status").String() != "completed" ||
			r.Get("usage.output_tokens").Int() != wantTokens {
			t.Errorf("responses named: %d %s", code, r.Raw)
		}
		evs := readAllEvents(t, postRaw(t, p.URL+"/v1/responses", base(respTools, named, true)))
		var names []string
		var args string
		for _, ev := range evs {
			if len(names) == 0 || names[len(names)-1] != ev.name {
				names = append(names, ev.name)
			}
			if ev.name == "response.function_call_arguments.delta" {
				args += ev.data.Get("delta").String()
			}
		}
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.function_call_arguments.delta",
			"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("event sequence (-want +got):\n%s", diff)
		}
		added, done, completed := evs[2].data.Get("item"), evs[len(evs)-3].data, evs[len(evs)-1].data.Get("response")
		if added.Get("type").String() != "function_call" || added.Get("arguments").String() != "" || added.Get("status").String() != "in_progress" ||
			args != callArgs || done.Get("arguments").String() != callArgs || done.Get("name").String() != "get_weather" ||
			completed.Get("output.0.arguments").String() != callArgs || completed.Get("usage.output_tokens").Int() != wantTokens {
			t.Errorf("responses named stream: added %s, arguments %q, done %s, completed %s", added.Raw, args, done.Raw, completed.Raw)
		}
	})
}

func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && cmp.Equal(x, y)
}

// A client that sends the tool call back with its result hits the prefix
// cache through the call, as it does through the sim's text answers: the
// call's tokens are the ones the sim's template renders for it, whatever
// spacing the client writes its arguments with.
func TestToolCallFollowUpCached(t *testing.T) {
	p := simproc.Start(t, append(toolFlags, "--sim-time-scale", fast, "--enable-prompt-tokens-details")...)
	system := words("You are a coding agent", 400)
	// hit is the least a follow-up must read from the cache: every full
	// block of the first turn's prompt and output but the last.
	hit := func(prompt, output int64) int64 { return (prompt+output)/16*16 - 16 }

	t.Run("chat", func(t *testing.T) {
		history := []any{msg("system", system), msg("user", "weather?")}
		body := map[string]any{"model": "test-model", "messages": history, "tools": chatWeather,
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}
		_, r := post(t, p.URL+"/v1/chat/completions", body)
		call := r.Get("choices.0.message.tool_calls.0")
		p1, o1 := r.Get("usage.prompt_tokens").Int(), r.Get("usage.completion_tokens").Int()
		var tc any
		_ = json.Unmarshal([]byte(call.Raw), &tc)
		body["messages"] = append(history, map[string]any{"role": "assistant", "content": "", "tool_calls": []any{tc}},
			map[string]any{"role": "tool", "tool_call_id": call.Get("id").String(), "content": "sunny"})
		body["tool_choice"] = "auto"
		_, r = post(t, p.URL+"/v1/chat/completions", body)
		if c := r.Get("usage.prompt_tokens_details.cached_tokens").Int(); c < hit(p1, o1) {
			t.Errorf("follow-up: %d cached of %d prompt tokens, want at least %d (first turn %d + %d)", c, r.Get("usage.prompt_tokens").Int(), hit(p1, o1), p1, o1)
		}
	})

	t.Run("messages", func(t *testing.T) {
		history := []any{msg("user", "weather?")}
		body := map[string]any{"model": "test-model", "max_tokens": 300, "system": system, "messages": history, "tools": msgWeather,
			"tool_choice": map[string]any{"type": "tool", "name": "get_weather"}}
		_, r := post(t, p.URL+"/v1/messages", body)
		use := r.Get("content.0")
		u := r.Get("usage")
		p1 := u.Get("input_tokens").Int() + u.Get("cache_read_input_tokens").Int() + u.Get("cache_creation_input_tokens").Int()
		o1 := u.Get("output_tokens").Int()
		var input any
		_ = json.Unmarshal([]byte(use.Get("input").Raw), &input) // sent back compact, as Go and JavaScript clients write it
		body["messages"] = append(history,
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": use.Get("id").String(), "name": "get_weather", "input": input}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": use.Get("id").String(), "content": "sunny"}}})
		delete(body, "tool_choice")
		_, r = post(t, p.URL+"/v1/messages", body)
		if c := r.Get("usage.cache_read_input_tokens").Int(); c < hit(p1, o1) {
			t.Errorf("follow-up: %d cached (%s), want at least %d (first turn %d + %d)", c, r.Get("usage").Raw, hit(p1, o1), p1, o1)
		}
	})

	t.Run("responses", func(t *testing.T) {
		input := []any{map[string]any{"type": "message", "role": "user", "content": "weather?"}}
		body := map[string]any{"model": "test-model", "instructions": system, "input": input, "tools": respWeather,
			"tool_choice": map[string]any{"type": "function", "name": "get_weather"}}
		_, r := post(t, p.URL+"/v1/responses", body)
		fc := r.Get("output.0")
		p1, o1 := r.Get("usage.input_tokens").Int(), r.Get("usage.output_tokens").Int()
		body["input"] = append(input,
			map[string]any{"type": "function_call", "call_id": fc.Get("call_id").String(), "name": "get_weather", "arguments": fc.Get("arguments").String()},
			map[string]any{"type": "function_call_output", "call_id": fc.Get("call_id").String(), "output": "sunny"})
		body["tool_choice"] = "auto"
		_, r = post(t, p.URL+"/v1/responses", body)
		if c := r.Get("usage.input_tokens_details.cached_tokens").Int(); c < hit(p1, o1) {
			t.Errorf("follow-up: %d cached (%s), want at least %d (first turn %d + %d)", c, r.Get("usage").Raw, hit(p1, o1), p1, o1)
		}
	})
}

package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/tap"
)

// Transport wraps the engines' transport for two engine answers that a
// client cannot act on but the warden can, both given before the engine did
// any work (so a second request to the same replica is safe):
//   - POST /v1/messages/count_tokens answered 404/405 by an engine without
//     that route: the count comes from the engine's own tokenizer endpoint
//     (POST /tokenize with the request turned into chat messages);
//   - a 400 for an output limit beyond the context: Claude Code asks for
//     32k-128k output tokens, far beyond a small context. vLLM 0.32 says
//     "max_tokens=N cannot be greater than max_model_len=C" (naming
//     max_completion_tokens on Messages, max_output_tokens on Responses) and
//     clamps any limit up to C to the context the prompt leaves, so the
//     request is sent once more with the limit C; older releases said
//     "'max_tokens' or 'max_completion_tokens' is too large: N. This model's
//     maximum context length is C tokens and your request has I input
//     tokens", and the limit becomes C-I. Either way the client gets the
//     most the engine could produce anyway.
//
// A 400 that names one of vLLM's launch flags gets one sentence saying how
// the warden sets it (FlagHints). Anything else, and a fallback that fails,
// returns the engine's response unchanged.
type Transport struct {
	Next    http.RoundTripper
	Clients *Clients
	Hints   FlagHints // what is added to a 400 that names a vLLM launch flag
}

// requestKey carries a proxied request's original body and API to the
// transport (WithRequest).
type requestKey struct{}

type request struct {
	body []byte
	kind tap.Kind
}

// WithRequest marks ctx's request as a proxied one whose client sent body
// in kind's API: the transport's fallbacks apply to such requests only
// (health checks and scrapes pass untouched).
func WithRequest(ctx context.Context, body []byte, kind tap.Kind) context.Context {
	return context.WithValue(ctx, requestKey{}, request{body, kind})
}

// maxErrorBody bounds how much of an engine error the transport reads.
const maxErrorBody = 64 << 10

var (
	// maxTokensTooLarge is the text of vLLM releases before the renderer
	// rework: requested, context, input.
	maxTokensTooLarge = regexp.MustCompile(`'max_tokens' or 'max_completion_tokens' is too large: (\d+)\. This model's maximum context length is (\d+) tokens and your request has (\d+) input tokens`)
	// maxTokensAboveLen is vLLM 0.32's (vllm/renderers/params.py): param,
	// requested, context.
	maxTokensAboveLen = regexp.MustCompile(`(max_tokens|max_completion_tokens|max_output_tokens)=(\d+) cannot be greater than max_model_len=(\d+)`)
)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.Next.RoundTrip(r)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	req, ok := r.Context().Value(requestKey{}).(request)
	if !ok || r.Method != http.MethodPost {
		return resp, nil
	}
	switch {
	case r.URL.Path == "/v1/messages/count_tokens" && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed):
		return t.countTokens(r, resp, req.body)
	case resp.StatusCode == http.StatusBadRequest && req.kind != tap.None:
		resp, err = t.clampMaxTokens(r, resp, req.body)
		if err == nil && resp.StatusCode == http.StatusBadRequest {
			resp = t.Hints.annotate(resp)
		}
		return resp, err
	}
	return resp, nil
}

// readError reads the start of an error response's body and puts it back in
// front of the rest, so that the response can still be returned unchanged.
func readError(resp *http.Response) []byte {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	return b
}

// resend sends body to path on the same replica with r's headers.
func (t *Transport) resend(r *http.Request, path string, body []byte) (*http.Response, error) {
	out := r.Clone(r.Context())
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = path, "", ""
	out.URL = &u
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.GetBody = nil
	return t.Next.RoundTrip(out)
}

// clampMaxTokens retries a request that vLLM refused only because its output
// limit exceeds the context left, with the limit lowered to what is left.
func (t *Transport) clampMaxTokens(r *http.Request, resp *http.Response, body []byte) (*http.Response, error) {
	msg := readError(resp)
	var requested string
	var left int
	if m := maxTokensAboveLen.FindSubmatch(msg); m != nil {
		requested = string(m[2])
		left, _ = strconv.Atoi(string(m[3])) // the engine clamps it to what the prompt leaves
	} else if m := maxTokensTooLarge.FindSubmatch(msg); m != nil {
		requested = string(m[1])
		ctx, _ := strconv.Atoi(string(m[2]))
		in, _ := strconv.Atoi(string(m[3]))
		left = ctx - in
	} else {
		return resp, nil
	}
	if left < 1 {
		return resp, nil // the prompt alone fills the context: the engine's error stands
	}
	nb, ok := setOutputLimit(body, left)
	if !ok {
		return resp, nil
	}
	again, err := t.resend(r, r.URL.Path, nb)
	if err != nil {
		return resp, nil // the first answer is still a true one
	}
	resp.Body.Close()
	if t.Clients.once("clamp:" + r.URL.Path) {
		t.Clients.log.Info("output limit lowered to what the engine's context allows (it refuses a larger max_tokens)",
			"path", r.URL.Path, "requested", requested, "max_tokens", left)
	}
	t.Clients.log.Debug("max_tokens clamped", "path", r.URL.Path, "requested", requested, "max_tokens", left,
		"status", again.StatusCode)
	return again, nil
}

// setOutputLimit sets the request's output limit fields (those present) to n.
func setOutputLimit(body []byte, n int) ([]byte, bool) {
	out, set := body, false
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if !gjson.GetBytes(body, k).Exists() {
			continue
		}
		b, err := sjson.SetBytes(out, k, n)
		if err != nil {
			return body, false
		}
		out, set = b, true
	}
	return out, set
}

// countTokens answers an Anthropic count_tokens request from the engine's
// POST /tokenize when the engine has no count_tokens route. A 404 that is an
// engine error (a JSON "error" object, e.g. an unknown model) is returned as
// it is; so is every failure of the fallback.
func (t *Transport) countTokens(r *http.Request, resp *http.Response, body []byte) (*http.Response, error) {
	if gjson.GetBytes(readError(resp), "error").Exists() {
		return resp, nil
	}
	tb, err := tokenizeBody(body)
	if err != nil {
		return resp, nil
	}
	tr, err := t.resend(r, "/tokenize", tb)
	if err != nil {
		return resp, nil
	}
	defer tr.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(tr.Body, 32<<20))
	count := gjson.GetBytes(raw, "count")
	if tr.StatusCode != http.StatusOK || count.Type != gjson.Number {
		t.Clients.log.Debug("count_tokens fallback failed", "status", tr.StatusCode, "body", truncate(string(raw), 200))
		return resp, nil
	}
	resp.Body.Close()
	if t.Clients.once("count_tokens-fallback") {
		t.Clients.log.Info("the engine has no /v1/messages/count_tokens: counting with its /tokenize")
	}
	out := []byte(`{"input_tokens":` + strconv.FormatInt(count.Int(), 10) + "}")
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	return &http.Response{Status: "200 OK", StatusCode: http.StatusOK, Proto: tr.Proto, ProtoMajor: tr.ProtoMajor,
		ProtoMinor: tr.ProtoMinor, Header: h, Body: io.NopCloser(bytes.NewReader(out)),
		ContentLength: int64(len(out)), Request: r}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// chatMessage is one OpenAI chat message of a /tokenize request.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// tokenizeBody turns an Anthropic count_tokens body into vLLM's
// TokenizeChatRequest ({model, messages, add_generation_prompt, tools}) the
// way vLLM's own Anthropic frontend converts it for generation: the system
// prompt (top-level and role "system" messages, Claude Code's billing line
// left out) as one leading system message, tool_use blocks as tool_calls,
// tool_result blocks as role "tool" messages, thinking text left out, and
// tools as function tools. Images are not counted.
func tokenizeBody(body []byte) ([]byte, error) {
	b := gjson.ParseBytes(body)
	var sys strings.Builder
	appendText(&sys, b.Get("system"))
	b.Get("messages").ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "system" {
			appendText(&sys, m.Get("content"))
		}
		return true
	})
	var msgs []chatMessage
	if sys.Len() > 0 {
		msgs = append(msgs, chatMessage{Role: "system", Content: sys.String()})
	}
	b.Get("messages").ForEach(func(_, m gjson.Result) bool {
		if role := m.Get("role").Str; role != "system" {
			msgs = append(msgs, convertMessage(role, m.Get("content"))...)
		}
		return true
	})
	req := map[string]any{"messages": msgs, "add_generation_prompt": true}
	if v := b.Get("model"); v.Type == gjson.String {
		req["model"] = v.Str
	}
	if tools := chatTools(b.Get("tools")); len(tools) > 0 {
		req["tools"] = tools
	}
	return json.Marshal(req)
}

// appendText adds a string or the text blocks of a block list, skipping
// Claude Code's billing block (as vLLM does).
func appendText(sb *strings.Builder, v gjson.Result) {
	if v.Type == gjson.String {
		sb.WriteString(v.Str)
		return
	}
	v.ForEach(func(_, blk gjson.Result) bool {
		if t := blk.Get("text").Str; blk.Get("type").Str == "text" && !strings.HasPrefix(t, identity.BillingPrefix) {
			sb.WriteString(t)
		}
		return true
	})
}

// convertMessage turns one Anthropic message into chat messages: tool
// results first (as vLLM appends them while converting the blocks), then
// the message itself when it has text or tool calls.
func convertMessage(role string, content gjson.Result) []chatMessage {
	if content.Type == gjson.String {
		return []chatMessage{{Role: role, Content: content.Str}}
	}
	var out []chatMessage
	var text strings.Builder
	msg := chatMessage{Role: role}
	content.ForEach(func(_, blk gjson.Result) bool {
		switch blk.Get("type").Str {
		case "text":
			text.WriteString(blk.Get("text").Str)
		case "tool_use":
			tc := chatToolCall{ID: blk.Get("id").Str, Type: "function"}
			tc.Function.Name = blk.Get("name").Str
			tc.Function.Arguments = "{}"
			if in := blk.Get("input"); in.IsObject() {
				tc.Function.Arguments = in.Raw
			}
			msg.ToolCalls = append(msg.ToolCalls, tc)
		case "tool_result":
			var rt strings.Builder
			appendText(&rt, blk.Get("content"))
			out = append(out, chatMessage{Role: "tool", ToolCallID: blk.Get("tool_use_id").Str, Content: rt.String()})
		}
		return true
	})
	if text.Len() > 0 || len(msg.ToolCalls) > 0 {
		msg.Content = text.String()
		out = append(out, msg)
	}
	return out
}

// chatTools converts Anthropic tools with an input_schema to OpenAI function
// tools.
func chatTools(tools gjson.Result) []map[string]any {
	var out []map[string]any
	tools.ForEach(func(_, t gjson.Result) bool {
		schema := t.Get("input_schema")
		if !schema.IsObject() {
			return true
		}
		fn := map[string]any{"name": t.Get("name").Str, "parameters": json.RawMessage(schema.Raw)}
		if d := t.Get("description"); d.Type == gjson.String {
			fn["description"] = d.Str
		}
		out = append(out, map[string]any{"type": "function", "function": fn})
		return true
	})
	return out
}

package compat

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// FlagHints adds one sentence to an engine's 400 whose message names one of
// vLLM's launch flags (vLLM 0.32: `"auto" tool choice requires
// --enable-auto-tool-choice and --tool-call-parser to be set`, `... requires
// --trust-request-chat-template`, `Set max_logprobs (--max-logprobs) ...`):
// what to give the warden so that its engines get that flag. The body stays
// the engine's JSON, with only error.message longer, so clients parse it as
// before and show the user the whole sentence.
type FlagHints struct {
	// Launched: `warden serve` started the engines; false for `warden route`.
	Launched bool
	// ToolsFix says how to turn tool calls on with this warden (how serve
	// chose, e.g. "restart it with --tools PARSER"); "" for the general one.
	ToolsFix string
}

var reVLLMFlag = regexp.MustCompile(`--[a-z][a-z0-9-]{2,}`)

// Sentence is what FlagHints adds for a message, "" when it names no flag.
func (h FlagHints) Sentence(msg string) string {
	flag := reVLLMFlag.FindString(msg)
	switch {
	case flag == "":
		return ""
	case flag == "--enable-auto-tool-choice" || flag == "--tool-call-parser":
		if h.ToolsFix != "" {
			return "(warden: " + h.ToolsFix + ")"
		}
		if h.Launched {
			return "(warden: `warden serve --tools PARSER` starts the engines with these flags; docs/tools.md lists the parsers)"
		}
		return "(warden: these are flags of each `vllm serve` behind this router; `warden serve` sets them itself, with --tools)"
	case flag == "--reasoning-parser":
		if h.Launched {
			return "(warden: `warden serve --reasoning PARSER` sets it)"
		}
		return "(warden: a flag of each `vllm serve` behind this router; `warden serve` sets it with --reasoning)"
	case h.Launched:
		return "(warden: the engines get vLLM flags after --, e.g. `warden serve ... -- " + flag + " ...`)"
	default:
		return "(warden: " + flag + " is a flag of each `vllm serve` behind this router)"
	}
}

// annotate adds h's sentence to a 400's error.message. Anything it cannot
// read as such an error is returned unchanged.
func (h FlagHints) annotate(resp *http.Response) *http.Response {
	raw := readError(resp)
	msg := gjson.GetBytes(raw, "error.message")
	if msg.Type != gjson.String {
		return resp
	}
	add := h.Sentence(msg.Str)
	if add == "" || strings.Contains(msg.Str, "(warden: ") {
		return resp
	}
	out, err := sjson.SetBytes(raw, "error.message", msg.Str+" "+add)
	if err != nil || len(raw) >= maxErrorBody {
		return resp // not all of it was read: leave it alone
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return resp
}

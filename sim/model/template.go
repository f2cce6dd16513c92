package model

import "strings"

// The chat template is ChatML (Qwen's): each turn renders as
// "<|im_start|>ROLE\nTEXT<|im_end|>\n" and the prompt ends with the generation
// prompt "<|im_start|>assistant\n". An assistant turn renders its text
// verbatim, so a client that replays the previous answer reproduces the
// generated tokens exactly and hits the cache through them.

// Turn is one chat turn: its role (system, user, assistant) and text.
type Turn struct {
	Role string
	Text string
}

// RenderChat flattens turns (with tools, as raw JSON, appended to the first
// system turn) into the prompt text.
func RenderChat(turns []Turn, tools []string) string {
	var b strings.Builder
	if len(tools) > 0 {
		if len(turns) == 0 || turns[0].Role != "system" {
			turns = append([]Turn{{Role: "system"}}, turns...)
		}
		t := turns[0].Text + "\n\n# Tools\n\n<tools>\n" + strings.Join(tools, "\n") + "\n</tools>"
		turns = append([]Turn{{Role: "system", Text: t}}, turns[1:]...)
	}
	for _, t := range turns {
		b.WriteString(imStart)
		b.WriteString(t.Role)
		b.WriteString("\n")
		b.WriteString(t.Text)
		b.WriteString(imEnd)
		b.WriteString("\n")
	}
	b.WriteString(imStart + "assistant\n")
	return b.String()
}

// ToolCall renders an assistant's tool call as Qwen's template does, args
// as rendered by renderArgs.
func ToolCall(name, args string) string {
	return ToolCallPrefix(name) + args + "}\n</tool_call>"
}

// ToolCallPrefix is the text of a tool call before its arguments.
func ToolCallPrefix(name string) string {
	return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": "
}

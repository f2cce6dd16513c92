package sim

import "strings"

// The chat template is ChatML (Qwen's): each turn renders as
// "<|im_start|>ROLE\nTEXT<|im_end|>\n" and the prompt ends with the generation
// prompt "<|im_start|>assistant\n". An assistant turn renders its text
// verbatim, so a client that replays the previous answer reproduces the
// generated tokens exactly and hits the cache through them.

// turn is one rendered chat turn.
type turn struct {
	role string
	text string
}

// renderChat flattens turns (with tools, as raw JSON, appended to the first
// system turn) into the prompt text.
func renderChat(turns []turn, tools []string) string {
	var b strings.Builder
	if len(tools) > 0 {
		if len(turns) == 0 || turns[0].role != "system" {
			turns = append([]turn{{role: "system"}}, turns...)
		}
		t := turns[0].text + "\n\n# Tools\n\n<tools>\n" + strings.Join(tools, "\n") + "\n</tools>"
		turns = append([]turn{{role: "system", text: t}}, turns[1:]...)
	}
	for _, t := range turns {
		b.WriteString(imStart)
		b.WriteString(t.role)
		b.WriteString("\n")
		b.WriteString(t.text)
		b.WriteString(imEnd)
		b.WriteString("\n")
	}
	b.WriteString(imStart + "assistant\n")
	return b.String()
}

// toolCall renders an assistant's tool call as Qwen's template does, args
// as rendered by renderArgs.
func toolCall(name, args string) string {
	return toolCallPrefix(name) + args + "}\n</tool_call>"
}

// toolCallPrefix is the text of a tool call before its arguments.
func toolCallPrefix(name string) string {
	return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": "
}

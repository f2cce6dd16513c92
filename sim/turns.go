package sim

import (
	"strings"

	"github.com/lmwarden/warden/sim/model"
	"github.com/tidwall/gjson"
)

// The three APIs' request bodies as chat turns for the template
// (template.go): messages, system prompts, tool calls and their results,
// in each API's shape.

// contentText renders message content: a string, or an array of blocks
// (Anthropic text / tool_use / tool_result / thinking / image, OpenAI text
// parts, Responses input_text / output_text), blocks joined by newlines.
func contentText(c gjson.Result) string {
	if !c.Exists() || c.Type == gjson.Null {
		return ""
	}
	if !c.IsArray() {
		if c.IsObject() {
			return blockText(c)
		}
		return c.String()
	}
	var parts []string
	c.ForEach(func(_, blk gjson.Result) bool {
		if t := blockText(blk); t != "" || blk.Get("type").String() == "text" {
			parts = append(parts, t)
		}
		return true
	})
	return strings.Join(parts, "\n")
}

func blockText(blk gjson.Result) string {
	if blk.Type == gjson.String {
		return blk.Str
	}
	switch blk.Get("type").String() {
	case "text", "input_text", "output_text":
		return blk.Get("text").String()
	case "tool_use":
		return model.ToolCall(blk.Get("name").String(), renderArgs(blk.Get("input")))
	case "tool_result":
		return "<tool_response>\n" + contentText(blk.Get("content")) + "\n</tool_response>"
	case "thinking", "redacted_thinking":
		return "" // dropped from history, as Qwen's template does
	case "image", "image_url", "input_image", "document":
		return "<|vision_start|><|image_pad|><|vision_end|>"
	default:
		return blk.Raw
	}
}

// openAITurns renders an OpenAI chat `messages` array.
func openAITurns(msgs gjson.Result) []model.Turn {
	var turns []model.Turn
	msgs.ForEach(func(_, m gjson.Result) bool {
		role := m.Get("role").String()
		text := contentText(m.Get("content"))
		m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
			if text != "" {
				text += "\n"
			}
			text += model.ToolCall(tc.Get("function.name").String(), renderArgs(tc.Get("function.arguments")))
			return true
		})
		switch role {
		case "tool":
			role, text = "user", "<tool_response>\n"+text+"\n</tool_response>"
		case "developer":
			role = "system"
		}
		turns = append(turns, model.Turn{Role: role, Text: text})
		return true
	})
	return turns
}

// anthropicTurns renders an Anthropic Messages body: `system` (string or
// text blocks) and `messages` (which may hold role "system" entries).
func anthropicTurns(body gjson.Result) []model.Turn {
	var turns []model.Turn
	if sys := body.Get("system"); sys.Exists() {
		turns = append(turns, model.Turn{Role: "system", Text: contentText(sys)})
	}
	body.Get("messages").ForEach(func(_, m gjson.Result) bool {
		turns = append(turns, model.Turn{Role: m.Get("role").String(), Text: contentText(m.Get("content"))})
		return true
	})
	return turns
}

// responsesTurns renders a Responses body: `instructions` and `input` (a
// string or items: messages, function_call, function_call_output).
func responsesTurns(body gjson.Result) []model.Turn {
	var turns []model.Turn
	if ins := body.Get("instructions"); ins.Exists() && ins.String() != "" {
		turns = append(turns, model.Turn{Role: "system", Text: ins.String()})
	}
	in := body.Get("input")
	if !in.IsArray() {
		return append(turns, model.Turn{Role: "user", Text: in.String()})
	}
	in.ForEach(func(_, it gjson.Result) bool {
		switch it.Get("type").String() {
		case "function_call":
			turns = append(turns, model.Turn{Role: "assistant", Text: model.ToolCall(it.Get("name").String(), renderArgs(it.Get("arguments")))})
		case "function_call_output":
			turns = append(turns, model.Turn{Role: "user", Text: "<tool_response>\n" + contentText(it.Get("output")) + "\n</tool_response>"})
		case "reasoning":
		default:
			role := it.Get("role").String()
			if role == "developer" {
				role = "system"
			}
			turns = append(turns, model.Turn{Role: role, Text: contentText(it.Get("content"))})
		}
		return true
	})
	return turns
}

// toolsRaw returns each tool definition's raw JSON.
func toolsRaw(tools gjson.Result) []string {
	var out []string
	tools.ForEach(func(_, t gjson.Result) bool {
		out = append(out, t.Raw)
		return true
	})
	return out
}

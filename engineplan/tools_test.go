package engineplan

import (
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/modelinfo"
)

func qwen(template string) modelinfo.Files {
	return modelinfo.Files{Model: "Qwen/Qwen3-4B-Instruct-2507", Source: modelinfo.SourceName, ChatTemplate: template}
}

func TestChooseTools(t *testing.T) {
	unknown := modelinfo.Files{Model: "acme/secret-model", Source: modelinfo.SourceName}
	for _, c := range []struct {
		name              string
		req               ToolsRequest
		tool, reasoning   string
		fromExtra         bool
		warn, fix, inInfo string
	}{
		{name: "auto: from the model", req: ToolsRequest{Tools: "auto", Reasoning: "auto", Files: qwen("")},
			tool: "hermes", inInfo: "chosen from its name"},
		{name: "auto: a thinking template adds its reasoning parser",
			req:  ToolsRequest{Tools: "auto", Reasoning: "auto", Files: qwen("{% if enable_thinking %}<think><tool_call></tool_call>")},
			tool: "hermes", reasoning: "qwen3", inInfo: "chosen from its chat template"},
		{name: "--reasoning off", req: ToolsRequest{Tools: "auto", Reasoning: "off", Files: qwen("{% if enable_thinking %}<think>")},
			tool: "hermes"},
		{name: "--tools off", req: ToolsRequest{Tools: "off", Reasoning: "auto", Files: qwen("")},
			fix: "--tools off", inInfo: "tool calling off"},
		{name: "--tools NAME", req: ToolsRequest{Tools: "qwen3_xml", Reasoning: "auto", Files: unknown}, tool: "qwen3_xml"},
		{name: "--tools NAME unknown to 0.32", req: ToolsRequest{Tools: "nope", Reasoning: "auto", Files: unknown, Version: "0.32.0"},
			tool: "nope", warn: `no tool-call parser "nope"`},
		{name: "--tools NAME with a plugin", req: ToolsRequest{Tools: "mine", Reasoning: "auto", Files: unknown, Version: "0.32.0",
			Extra: []string{"--tool-parser-plugin", "p.py"}}, tool: "mine"},
		{name: "flags after -- win", req: ToolsRequest{Tools: "auto", Reasoning: "auto", Files: qwen(""),
			Extra: []string{"--enable-auto-tool-choice", "--tool-call-parser=qwen3_xml"}}, fromExtra: true},
		{name: "a parser after -- without auto", req: ToolsRequest{Tools: "auto", Reasoning: "auto", Files: qwen(""),
			Extra: []string{"--tool-call-parser", "hermes"}}, fromExtra: true, warn: "without --enable-auto-tool-choice",
			fix: "--enable-auto-tool-choice"},
		{name: "a reasoning parser after -- wins", req: ToolsRequest{Tools: "auto", Reasoning: "auto",
			Files: qwen("{% if enable_thinking %}<think>"), Extra: []string{"--reasoning-parser", "deepseek_r1"}}, tool: "hermes"},
		{name: "unknown model: off, said", req: ToolsRequest{Tools: "auto", Reasoning: "auto", Files: unknown},
			warn: "no parser known for acme/secret-model", fix: "--tools PARSER", inInfo: "only the name was read"},
		{name: "a parser newer than the vLLM", req: ToolsRequest{Tools: "auto", Reasoning: "auto", Version: "0.9.2",
			Files: modelinfo.Files{Model: "Qwen/Qwen3-Coder-30B-A3B-Instruct"}}, warn: "which vLLM 0.9.2 lacks", fix: "upgrade vLLM"},
		{name: "the simulator is vLLM 0.32", req: ToolsRequest{Tools: "auto", Reasoning: "auto", Sim: true,
			Files: modelinfo.Files{Model: "Qwen/Qwen3-Coder-30B-A3B-Instruct"}}, tool: "qwen3_coder"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ChooseTools(c.req)
			if got.ToolParser != c.tool || got.ReasoningParser != c.reasoning || got.FromExtra != c.fromExtra {
				t.Errorf("tool %q reasoning %q fromExtra %v, want %q %q %v", got.ToolParser, got.ReasoningParser,
					got.FromExtra, c.tool, c.reasoning, c.fromExtra)
			}
			warns := strings.Join(got.Warn, "\n")
			if (c.warn == "") != (warns == "") || !strings.Contains(warns, c.warn) {
				t.Errorf("warnings %q, want %q", warns, c.warn)
			}
			if (c.fix == "") != (got.Fix == "") || !strings.Contains(got.Fix, c.fix) {
				t.Errorf("fix %q, want %q", got.Fix, c.fix)
			}
			if !strings.Contains(got.Info, c.inInfo) {
				t.Errorf("info %q, want %q in it", got.Info, c.inInfo)
			}
		})
	}
}

func TestToolFlagsInArgv(t *testing.T) {
	c := ChooseTools(ToolsRequest{Tools: "auto", Reasoning: "auto", Files: qwen("{% if enable_thinking %}<think>")})
	argv := Engine{Kind: "vllm", Model: "m", ToolFlags: c.Flags(), Extra: []string{"--x"}}.Argv(8000)
	want := []string{"--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3", "--x"}
	if got := argv[len(argv)-len(want):]; !slices.Equal(got, want) {
		t.Errorf("argv ends %q, want %q", got, want)
	}
	if off := (ToolsChoice{}).Flags(); len(off) != 0 {
		t.Errorf("no parsers: flags %q", off)
	}
}

func TestCheckToolSettings(t *testing.T) {
	for _, c := range []struct {
		tools, reasoning string
		extra            []string
		err              string
	}{
		{"auto", "auto", nil, ""},
		{"hermes", "qwen3", nil, ""},
		{"auto", "auto", []string{"--tool-call-parser", "x", "--enable-auto-tool-choice"}, ""},
		{"hermes", "auto", []string{"--tool-call-parser", "x"}, "twice"},
		{"off", "auto", []string{"--enable-auto-tool-choice"}, "twice"},
		{"auto", "qwen3", []string{"--reasoning-parser=x"}, "twice"},
		{"", "auto", nil, "want auto, off or"},
		{"a b", "auto", nil, "want auto, off or"},
	} {
		err := CheckToolSettings(c.tools, c.reasoning, c.extra)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("CheckToolSettings(%q, %q, %q) = %v, want %q", c.tools, c.reasoning, c.extra, err, c.err)
		}
	}
}

package enginelog

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/lmwarden/warden/enginelog/enginelogtest"
)

// fed is a Tail that read all of text.
func fed(text string) *Tail {
	tw := NewTail(io.Discard)
	tw.Write([]byte(text))
	return tw
}

func TestCauseOfVLLMFailures(t *testing.T) {
	for _, tt := range enginelogtest.Cases {
		text := enginelogtest.Fixture(t, tt.Log)
		tw := fed(text)
		d := tw.Diagnose(8101, 0)
		if !strings.HasPrefix(d.Reason, tt.Reason) || (tt.Reason == "") != (d.Reason == "") {
			t.Errorf("%s: reason %q, want it to start with %q", tt.Log, d.Reason, tt.Reason)
			continue
		}
		for _, w := range tt.Hint {
			if !strings.Contains(d.Hint, w) {
				t.Errorf("%s: hint %q lacks %q", tt.Log, d.Hint, w)
			}
		}
		if tt.Hint == nil && d.Hint != "" {
			t.Errorf("%s: hint %q, want none", tt.Log, d.Hint)
		}
		if tt.Reason == "" {
			continue
		}
		if d.Line != tt.Line || !strings.HasSuffix(enginelogtest.Line(text, d.Line), d.Reason) {
			t.Errorf("%s: reason at line %d (%q), want line %d", tt.Log, d.Line, enginelogtest.Line(text, d.Line), tt.Line)
		}
		if c := d.Context; len(c) != ctxBefore+1 || c[len(c)-1] != enginelogtest.Line(text, d.Line) || c[0] != enginelogtest.Line(text, d.Line-ctxBefore) {
			t.Errorf("%s: context %q, want lines %d-%d", tt.Log, c, d.Line-ctxBefore, d.Line)
		}
		if want := strings.Count(text, "\n") - d.Line; d.After != want {
			t.Errorf("%s: %d lines after the reason, want %d", tt.Log, d.After, want)
		}
	}
}

// The cause of the motivating failure (issue 24: a context beyond the KV
// cache) is far above the last lines, which say nothing that helps.
func TestTheLastLinesAloneMissTheCause(t *testing.T) {
	for _, log := range []string{"vllm-0.32-cpu-max-model-len.log", "vllm-0.32-gpu-free-memory.log",
		"vllm-0.32-gpu-cuda-oom.log", "vllm-0.32-gpu-no-cuda.log"} {
		tw := fed(enginelogtest.Fixture(t, log))
		last := tw.Lines()
		if h := Hint(last, 8101); h != "" {
			t.Errorf("%s: the last %d lines alone give a hint (%q): the fixture no longer tests the search", log, len(last), h)
		}
		if !strings.Contains(strings.Join(last, "\n"), "resource_tracker") && strings.Contains(log, "gpu") {
			t.Errorf("%s: no resource_tracker warning at the end", log)
		}
	}
}

// Warnings and INFO lines are never a cause, even with a rule's words.
func TestWarningsAreNeverTheCause(t *testing.T) {
	if d := fed(enginelogtest.Warnings).Diagnose(8101, 0); d.Reason != "" || d.Hint != "" {
		t.Errorf("reason %q hint %q from warnings and INFO lines", d.Reason, d.Hint)
	}
	// Nor are they the last message: that is the INFO line, its prefix cut.
	if msg, ok := LastMessage(strings.Split(strings.TrimSuffix(enginelogtest.Warnings, "\n"), "\n")); !ok || !strings.HasPrefix(msg, "Free memory on device (22.87") {
		t.Errorf("LastMessage = %q, %v; want the INFO line's message", msg, ok)
	}
	if msg, ok := LastMessage([]string{"  File \"x.py\", line 1, in f", "UserWarning: w"}); ok {
		t.Errorf("LastMessage of a frame and a warning = %q, want none", msg)
	}
}

func TestHintRulesForVLLM032Texts(t *testing.T) {
	tests := []struct{ name, line, want string }{
		// vLLM 0.32.0 entrypoints/launchers/launcher.py:372 (validate_api_server_args)
		{"reasoning parser", "KeyError: 'invalid reasoning parser: nope (chose from { deepseek_r1,qwen3 })'",
			`no reasoning parser "nope": pass --reasoning auto (the model's, when it thinks), off, or one of vLLM's names: deepseek_r1, qwen3`},
		// vLLM 0.32.0 v1/engine/utils.py:1431 (wait_for_engine_startup), a segfault
		{"core ended by a signal", "RuntimeError: Engine core initialization failed. See root cause above. " +
			"Failed core proc(s): {'EngineCore_DP0': -11}", "EngineCore_DP0 process was killed by signal 11 (segmentation fault)"},
		// vLLM 0.32.0: exit code 1 is no signal, and says nothing by itself
		{"core exited", "RuntimeError: Engine core initialization failed. See root cause above. " +
			"Failed core proc(s): {'EngineCore': 1}", ""},
		// torch 2.13 c10/cuda/CUDACachingAllocator.cpp: its OOM names expandable_segments,
		// which is not the offload rule's refusal
		{"torch OOM names expandable segments", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. " +
			"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
			"out of GPU memory"},
		{"INFO with a rule's words", "(Worker pid=3) INFO 12-01 22:36:09 [gpu_worker.py:1034] Free memory on device (22.87/23.52 GiB) on startup.", ""},
	}
	for _, tt := range tests {
		got := Hint([]string{"noise", tt.line}, 8101)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s: Hint() = %q, want it to contain %q", tt.name, got, tt.want)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		line string
		msg  string
		kind lineKind
	}{
		{"(EngineCore_DP0 pid=18799) ERROR 10-08 20:33:48 [core.py:708] ValueError: x", "ValueError: x", exceptionLine},
		{"(EngineCore pid=1) ERROR 12-01 22:36:11 [core.py:1510] EngineCore failed to start.", "EngineCore failed to start.", errorLine},
		{"(EngineCore pid=1) ERROR 12-01 22:36:11 [core.py:1510] Traceback (most recent call last):", "Traceback (most recent call last):", notCause},
		{"(EngineCore pid=1) ERROR 12-01 22:36:11 [core.py:1510]     raise ValueError(", "    raise ValueError(", notCause},
		{"torch.OutOfMemoryError: CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory.", exceptionLine},
		{"huggingface_hub.errors.HFValidationError: Repo id", "huggingface_hub.errors.HFValidationError: Repo id", exceptionLine},
		{"Exception: CPU Offloading", "Exception: CPU Offloading", exceptionLine},
		{"vllm serve: error: argument --max-model-len: invalid", "vllm serve: error: argument --max-model-len: invalid", exceptionLine},
		{"Fatal Python error: Segmentation fault", "Fatal Python error: Segmentation fault", exceptionLine},
		{"  what():  CUDA error: out of memory", "what():  CUDA error: out of memory", exceptionLine},
		{"OSError: [Errno 98] Address already in use", "OSError: [Errno 98] Address already in use", exceptionLine},
		{"Address already in use", "Address already in use", markerLine},
		{"(APIServer pid=1) WARNING 12-01 22:35:19 [x.py:1] OSError: [Errno 24]", "OSError: [Errno 24]", notCause},
		{"(APIServer pid=1) INFO 12-01 22:35:19 [x.py:1] ValueError: y", "ValueError: y", notCause},
		{"/x/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked", "", notCause},
		{"UserWarning: something", "UserWarning: something", notCause},
		{"Loading safetensors checkpoint shards: 100% Completed", "", notCause},
		{"Process EngineCore:", "", notCause},
	}
	for _, tt := range tests {
		msg, kind := classify(tt.line)
		if kind != tt.kind || tt.msg != "" && msg != tt.msg {
			t.Errorf("classify(%q) = %q, %d; want %q, %d", tt.line, msg, kind, tt.msg, tt.kind)
		}
	}
	if !isGeneric("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}") ||
		!isGeneric("Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.") ||
		isGeneric("ValueError: To serve at least one request") {
		t.Error("isGeneric")
	}
}

// What a run keeps stays bounded however much it prints, and the lines
// that name a known cause outlast the flood of other errors.
func TestTailMemoryIsBounded(t *testing.T) {
	tw := NewTail(io.Discard)
	tw.Write([]byte("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"))
	for i := range 5000 {
		fmt.Fprintf(tw, "(EngineCore pid=1) ERROR 12-01 22:36:11 [core.py:1] request %d failed\n", i)
		fmt.Fprintf(tw, "ValueError: request %d is bad\n", i)
		fmt.Fprintf(tw, "ValueError: request %d is bad\n", i) // repeats are kept once
	}
	tw.Write([]byte(strings.Repeat("x", 1<<20)))
	if len(tw.kept) > maxKept {
		t.Errorf("kept %d lines, more than %d", len(tw.kept), maxKept)
	}
	if len(tw.partial) > maxLineBytes {
		t.Errorf("the unfinished line holds %d bytes, more than %d", len(tw.partial), maxLineBytes)
	}
	d := tw.Diagnose(8101, 0)
	if d.Line != 1 || !strings.Contains(d.Hint, "out of GPU memory") {
		t.Errorf("after the flood: reason %q at line %d, hint %q", d.Reason, d.Line, d.Hint)
	}
	if d := tw.Diagnose(8101, 100); strings.Contains(d.Reason, "OutOfMemory") || !strings.HasPrefix(d.Reason, "ValueError: request 49") {
		t.Errorf("within the last 100 lines: reason %q, want the latest exception", d.Reason)
	}
	if d.After != 15001 {
		t.Errorf("%d lines after the cause, want 15000 and the unfinished one", d.After)
	}
}

// TestPydanticDetailIsTheReason: vLLM 0.32 refusing a --max-model-len above
// the model's (on its CPU build, 2026-12-02: `warden serve --device cpu ...
// -- --max-model-len 999999`) prints pydantic's header and, indented under
// it, the check's own words; the reason is those words, not the header.
func TestPydanticDetailIsTheReason(t *testing.T) {
	lines := []string{
		`(APIServer pid=31377)   File "/venv/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__`,
		`(APIServer pid=31377)     s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)`,
		`pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig`,
		`  Value error, User-specified max_model_len (999999) is greater than the derived max_model_len (max_position_embeddings=16384.0 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. [type=value_error, input_value=ArgsKwargs((), {'model': ...}), input_type=ArgsKwargs]`,
		`    For further information visit https://errors.pydantic.dev/2.14/v/value_error`,
	}
	d := fed(strings.Join(lines, "\n")+"\n").Diagnose(0, 0)
	if !strings.HasPrefix(d.Reason, "Value error, User-specified max_model_len (999999)") {
		t.Errorf("reason %q, want pydantic's detail line", d.Reason)
	}
	if len(d.Context) < 2 || !strings.Contains(d.Context[len(d.Context)-2], "1 validation error for ModelConfig") {
		t.Errorf("context %q, want the header just before the detail", d.Context)
	}
}

// TestPydanticTypedDetailIsTheReason: vLLM 0.32 refusing a field of a JSON
// flag (`-- --kv-events-config '{"enable_kv_cache_events": true, "bogus": 1}'`
// on its CPU build, 2026-12-06) prints argparse's line with pydantic's
// header, the field, and indented the error with its [type=...]; the
// reason is that error, with the field and the header before it.
func TestPydanticTypedDetailIsTheReason(t *testing.T) {
	lines := []string{
		`usage: vllm serve [model_tag] [options]`,
		`vllm serve: error: argument --kv-events-config: 1 validation error for KVEventsConfig`,
		`bogus`,
		`  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=1, input_type=int]`,
		`    For further information visit https://errors.pydantic.dev/2.14/v/unexpected_keyword_argument`,
	}
	d := fed(strings.Join(lines, "\n")+"\n").Diagnose(0, 0)
	if !strings.HasPrefix(d.Reason, "Unexpected keyword argument [type=unexpected_keyword_argument") {
		t.Errorf("reason %q, want pydantic's detail line", d.Reason)
	}
	if n := len(d.Context); n < 3 || d.Context[n-2] != "bogus" || !strings.Contains(d.Context[n-3], "validation error for KVEventsConfig") {
		t.Errorf("context %q, want the header and the field before the detail", d.Context)
	}
}

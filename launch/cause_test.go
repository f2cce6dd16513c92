package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/ports"
	"github.com/lmwarden/warden/internal/simproc"
)

// fixture reads a log in testdata (README.md there says where each comes from).
func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fed is a tailWriter that read all of text.
func fed(text string) *tailWriter {
	tw := newTailWriter(io.Discard)
	tw.Write([]byte(text))
	return tw
}

// logLine is line n (from 1) of text, without a carriage return (vLLM
// ends some lines with CRLF).
func logLine(text string, n int) string {
	lines := strings.Split(text, "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSuffix(lines[n-1], "\r")
}

// causeCases are the real failures of vLLM 0.32.0's CPU build (captured by
// hand from `warden serve --device cpu --dp 1`, as realvllm's
// TestFailedStart makes them) and the GPU-like logs, with the cause each
// must yield.
var causeCases = []struct {
	log    string
	reason string   // the start of the reason; "" for none
	line   int      // the reason's line in the log
	hint   []string // parts of the hint; nil for none
}{
	{"vllm-0.32-cpu-max-model-len.log", "ValueError: To serve at least one request with the model's max seq len (16384)", 72,
		[]string{"(16384 tokens", "`warden serve ... -- --max-model-len 8160`", "--cpu-kv-cache"}},
	{"vllm-0.32-cpu-no-such-model.log", "huggingface_hub.errors.HFValidationError: Repo id must be in the form", 53,
		[]string{"neither a local folder nor a Hugging Face model name"}},
	{"vllm-0.32-cpu-unknown-flag.log", "vllm: error: unrecognized arguments: --no-such-flag", 6,
		[]string{"check the extra arguments after --"}},
	{"vllm-0.32-cpu-bad-tool-parser.log", "KeyError: 'invalid tool call parser: nope (chose from { apertus,", 38,
		[]string{`no tool-call parser "nope"`, "--tools auto", "apertus, cohere_command3,", "hermes", "qwen3_coder"}},
	{"vllm-0.32-cpu-auto-tool-choice-alone.log", "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser", 13,
		[]string{"needs a --tool-call-parser", "--tools"}},
	{"vllm-0.32-cpu-enginecore-killed.log", "RuntimeError: Engine core initialization failed. See root cause above. " +
		"Failed core proc(s): {'EngineCore': -9}", 80, []string{"EngineCore process was killed by signal 9", "OOM killer"}},
	{"vllm-0.32-cpu-killed-loading.log", "", 0, nil},
	{"vllm-0.32-cpu-offload-refusal.log", "Exception: CPU Offloading is currently only supported on CUDA-alike and XPU GPUs", 30,
		[]string{"--kv-offload off"}},
	{"vllm-0.32-gpu-free-memory.log", "ValueError: Free memory on device cuda:0 (3.12/79.19 GiB) on startup is less than desired", 21,
		[]string{"the GPU is already in use"}},
	{"vllm-0.32-gpu-cuda-oom.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB.", 18,
		[]string{"out of GPU memory", "--max-num-seqs"}},
	{"vllm-0.32-gpu-no-cuda.log", "RuntimeError: No CUDA GPUs are available", 23, []string{"found no usable GPU"}},
}

func TestCauseOfVLLMFailures(t *testing.T) {
	for _, tt := range causeCases {
		text := fixture(t, tt.log)
		tw := fed(text)
		d := tw.diagnose(8101, 0)
		if !strings.HasPrefix(d.reason, tt.reason) || (tt.reason == "") != (d.reason == "") {
			t.Errorf("%s: reason %q, want it to start with %q", tt.log, d.reason, tt.reason)
			continue
		}
		for _, w := range tt.hint {
			if !strings.Contains(d.hint, w) {
				t.Errorf("%s: hint %q lacks %q", tt.log, d.hint, w)
			}
		}
		if tt.hint == nil && d.hint != "" {
			t.Errorf("%s: hint %q, want none", tt.log, d.hint)
		}
		if tt.reason == "" {
			continue
		}
		if d.line != tt.line || !strings.HasSuffix(logLine(text, d.line), d.reason) {
			t.Errorf("%s: reason at line %d (%q), want line %d", tt.log, d.line, logLine(text, d.line), tt.line)
		}
		if c := d.context; len(c) != ctxBefore+1 || c[len(c)-1] != logLine(text, d.line) || c[0] != logLine(text, d.line-ctxBefore) {
			t.Errorf("%s: context %q, want lines %d-%d", tt.log, c, d.line-ctxBefore, d.line)
		}
		if want := strings.Count(text, "\n") - d.line; d.after != want {
			t.Errorf("%s: %d lines after the reason, want %d", tt.log, d.after, want)
		}
	}
}

// The cause of the motivating failure (issue 24: a context beyond the KV
// cache) is far above the last lines, which say nothing that helps.
func TestTheLastLinesAloneMissTheCause(t *testing.T) {
	for _, log := range []string{"vllm-0.32-cpu-max-model-len.log", "vllm-0.32-gpu-free-memory.log",
		"vllm-0.32-gpu-cuda-oom.log", "vllm-0.32-gpu-no-cuda.log"} {
		tw := fed(fixture(t, log))
		last := tw.Lines()
		if h := Hint(last, 8101); h != "" {
			t.Errorf("%s: the last %d lines alone give a hint (%q): the fixture no longer tests the search", log, len(last), h)
		}
		if !strings.Contains(strings.Join(last, "\n"), "resource_tracker") && strings.Contains(log, "gpu") {
			t.Errorf("%s: no resource_tracker warning at the end", log)
		}
	}
}

// TestStartupErrorLeadsWithTheCause starts a fake engine that prints each
// failure (after lines a previous run left in the log) and checks the
// message: the rank and exit, vLLM's cause, the hint, the lines up to the
// cause with its line in the log file, the log's path.
func TestStartupErrorLeadsWithTheCause(t *testing.T) {
	for _, tt := range causeCases {
		if tt.reason == "" {
			continue
		}
		t.Run(tt.log, func(t *testing.T) {
			dir := t.TempDir()
			specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_FAIL=" + fixture(t, tt.log)} })
			os.MkdirAll(filepath.Dir(specs[0].LogPath), 0o755)
			os.WriteFile(specs[0].LogPath, []byte("an earlier run\nof this rank\nwith three lines\n"), 0o644)
			var prog simproc.SyncBuffer
			opts := testOptions()
			opts.Progress = &prog
			_, err := Start(context.Background(), specs, opts)
			var se *StartupError
			if !errors.As(err, &se) {
				t.Fatalf("Start error = %v, want a *StartupError", err)
			}
			msg := se.Error()
			lines := strings.Split(msg, "\n")
			want0 := fmt.Sprintf("engine rank 0 (port %d, GPU 0) failed to start: exited with status 1", specs[0].Port)
			if len(lines) < 5 || lines[0] != want0 || lines[1] != "cause: "+se.Reason ||
				!strings.HasPrefix(se.Reason, tt.reason) || !strings.HasPrefix(lines[2], "hint: ") {
				t.Fatalf("the message does not lead with the exit, the cause and the hint:\n%s", msg)
			}
			for _, w := range tt.hint {
				if !strings.Contains(lines[2], w) {
					t.Errorf("hint lacks %q:\n%s", w, msg)
				}
			}
			// 3 earlier lines, the warden's header, the fake's own line.
			if want := 3 + 1 + 1 + tt.line; se.ReasonLine != want {
				t.Errorf("ReasonLine %d, want %d", se.ReasonLine, want)
			}
			log, _ := os.ReadFile(specs[0].LogPath)
			at := logLine(string(log), se.ReasonLine)
			if !strings.HasSuffix(at, se.Reason) {
				t.Errorf("line %d of the log is %q, not the cause", se.ReasonLine, at)
			}
			header := fmt.Sprintf("last lines of %s up to the cause, line %d:", specs[0].LogPath, se.ReasonLine)
			if lines[3] != header || !strings.Contains(msg, "\n  | "+at+"\nfull log: "+specs[0].LogPath) {
				t.Errorf("want %q, then the lines up to the cause and the log:\n%s", header, msg)
			}
			if se.LinesAfter > 1 && !strings.HasSuffix(msg, fmt.Sprintf("(%d more lines after the cause)", se.LinesAfter)) {
				t.Errorf("the last line does not count what follows the cause:\n%s", msg)
			}
			if !strings.Contains(prog.String(), "stopped") || !strings.Contains(prog.String(), se.Reason[:40]) {
				t.Errorf("the progress display's last state of the rank lacks the cause:\n%s", prog.String())
			}
		})
	}
}

// shellSpec is an "engine" that runs script in sh and never serves.
func shellSpec(t *testing.T, script string) []Spec {
	t.Helper()
	port, err := ports.Loopback()
	if err != nil {
		t.Fatal(err)
	}
	return []Spec{{Rank: 0, Port: port, Argv: []string{"/bin/sh", "-c", script},
		LogPath: filepath.Join(t.TempDir(), "rank-0.log")}}
}

// printing is a shell command that prints log to stdout.
func printing(t *testing.T, log string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "out.log")
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	return "cat " + strconv.Quote(p)
}

// An engine killed by SIGKILL while loading (the OOM killer, or someone):
// the message says so first, quotes no line of the log as the cause (not
// even an exception it logged while loading), and names the OOM killer.
func TestKilledEngineIsNoLogLine(t *testing.T) {
	log := fixture(t, "vllm-0.32-cpu-killed-loading.log") + "ValueError: an exception logged while loading\n" +
		"/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown\n"
	_, err := Start(context.Background(), shellSpec(t, printing(t, log)+"; kill -9 $$"), testOptions())
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start error = %v, want a *StartupError", err)
	}
	lines := strings.Split(se.Error(), "\n")
	if !strings.HasSuffix(lines[0], "failed to start: killed by signal killed") || se.Reason != "" ||
		!strings.HasPrefix(lines[1], "hint: the engine was killed by SIGKILL") || !strings.Contains(lines[1], "OOM killer") {
		t.Errorf("want the kill and the OOM hint first, no cause line:\n%s", se.Error())
	}
	if len(se.Context) != contextLines || !strings.HasPrefix(lines[2], "last lines of ") {
		t.Errorf("want the last %d lines as context, got %d:\n%s", contextLines, len(se.Context), se.Error())
	}
}

// Warnings and INFO lines are never a cause, even with a rule's words.
func TestWarningsAreNeverTheCause(t *testing.T) {
	log := strings.Join([]string{
		"(APIServer pid=1) WARNING 12-01 22:35:19 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`.",
		"(Worker pid=3) INFO 12-01 22:36:09 [gpu_worker.py:1034] Free memory on device (22.87/23.52 GiB) on startup. Desired GPU memory utilization is (0.9, 21.17 GiB).",
		"(Worker pid=3) WARNING 12-01 22:36:09 [x.py:1] out of memory once, retrying with a smaller batch",
		"/x/triton_utils/dispatcher.py:138: FutureWarning: `torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead",
		"[W1201 22:36:09.406013352 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy (function init_cpu_memory_env)",
		"/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown",
		"  warnings.warn('resource_tracker: There appear to be %d '",
	}, "\n") + "\n"
	if d := fed(log).diagnose(8101, 0); d.reason != "" || d.hint != "" {
		t.Errorf("reason %q hint %q from warnings and INFO lines", d.reason, d.hint)
	}
	// A crash's reason: the cause, not the warning printed last.
	p := runToExit(t, "printf 'RuntimeError: the real one\\n'; "+printing(t, log)+"; exit 1")
	if got := crashReason(p); got != "exited with status 1: RuntimeError: the real one" {
		t.Errorf("crashReason = %q", got)
	}
	p = runToExit(t, printing(t, log)+"; exit 1")
	if got := crashReason(p); !strings.HasPrefix(got, "exited with status 1: Free memory on device (22.87") {
		t.Errorf("crashReason without a cause = %q, want the last line that is no warning", got)
	}
	p = runToExit(t, "printf 'ValueError: hours ago\\nINFO serving\\n'; kill -9 $$")
	if got := crashReason(p); got != "killed by signal killed" {
		t.Errorf("crashReason after a SIGKILL = %q, want the signal alone", got)
	}
}

// runToExit runs script in sh as an engine process and waits for its end.
func runToExit(t *testing.T, script string) *proc {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "r.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := spawn([]string{"/bin/sh", "-c", script}, os.Environ(), f, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the script did not end")
	}
	<-p.drained
	return p
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
	tw := newTailWriter(io.Discard)
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
	d := tw.diagnose(8101, 0)
	if d.line != 1 || !strings.Contains(d.hint, "out of GPU memory") {
		t.Errorf("after the flood: reason %q at line %d, hint %q", d.reason, d.line, d.hint)
	}
	if d := tw.diagnose(8101, 100); strings.Contains(d.reason, "OutOfMemory") || !strings.HasPrefix(d.reason, "ValueError: request 49") {
		t.Errorf("within the last 100 lines: reason %q, want the latest exception", d.reason)
	}
	if d.after != 15001 {
		t.Errorf("%d lines after the cause, want 15000 and the unfinished one", d.after)
	}
}

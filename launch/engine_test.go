package launch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/gpu"
)

func TestArgv(t *testing.T) {
	tests := []struct {
		name string
		e    Engine
		want []string
	}{
		{
			name: "vllm with defaults from the engine",
			e:    Engine{Kind: "vllm", Model: "Qwen/Qwen3-4B-Instruct-2507", MaxNumSeqs: 32, Extra: []string{"--max-model-len", "40960"}},
			want: []string{"vllm", "serve", "Qwen/Qwen3-4B-Instruct-2507", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "Qwen/Qwen3-4B-Instruct-2507", "--max-num-seqs", "32",
				"--enable-prompt-tokens-details", "--max-model-len", "40960"},
		},
		{
			name: "vllm path, served name and tensor parallel",
			e:    Engine{Kind: "vllm", VLLMPath: "/opt/venv/bin/vllm", Model: "m", ServedName: "qwen", MaxNumSeqs: 256, TP: 2},
			want: []string{"/opt/venv/bin/vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "qwen", "--max-num-seqs", "256", "--tensor-parallel-size", "2",
				"--enable-prompt-tokens-details"},
		},
		{
			name: "vllm on CPU with its KV cache size",
			e:    Engine{Kind: "vllm", Model: "m", MaxNumSeqs: 128, KVBytes: 4 << 30},
			want: []string{"vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "m", "--max-num-seqs", "128", "--kv-cache-memory-bytes", "4294967296",
				"--enable-prompt-tokens-details"},
		},
		{
			name: "sim puts its own flags before the user's",
			e: Engine{Kind: "sim", SimPath: "/usr/bin/warden", Model: "m", MaxNumSeqs: 32,
				SimArgs: []string{"--profile", "a4000"}, Extra: []string{"--time-scale", "9"}},
			want: []string{"/usr/bin/warden", "sim", "serve", "m", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "m", "--max-num-seqs", "32", "--enable-prompt-tokens-details",
				"--profile", "a4000", "--time-scale", "9"},
		},
		{
			name: "vllm ignores SimArgs and omits an unset max-num-seqs",
			e:    Engine{Kind: "vllm", Model: "m", SimArgs: []string{"--profile", "x"}},
			want: []string{"vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "m", "--enable-prompt-tokens-details"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.e.Argv(8101)); diff != "" {
				t.Errorf("Argv() (-want +got):\n%s", diff)
			}
		})
	}
	exe, _ := os.Executable()
	if got := (Engine{Kind: "sim", Model: "m"}).Argv(1)[0]; got != exe {
		t.Errorf("sim without SimPath runs %q, want this executable %q", got, exe)
	}
}

func TestDefaultMaxNumSeqs(t *testing.T) {
	dev := func(name string, memGiB uint64) gpu.Device { return gpu.Device{Name: name, MemTotal: memGiB * gib} }
	tests := []struct {
		name string
		devs []gpu.Device
		want int
	}{
		{"no GPUs (simulator)", nil, 256},
		{"H100 80GB", []gpu.Device{dev("NVIDIA H100 80GB HBM3", 80)}, 1024},
		{"A100 80GB is excluded", []gpu.Device{dev("NVIDIA A100-SXM4-80GB", 80)}, 256},
		{"A4000 16GB", []gpu.Device{dev("NVIDIA RTX A4000", 16)}, 256},
		{"the smallest GPU of a group decides", []gpu.Device{dev("NVIDIA H200", 141), dev("NVIDIA L40S", 48)}, 256},
	}
	for _, tt := range tests {
		if got := DefaultMaxNumSeqs(tt.devs); got != tt.want {
			t.Errorf("%s: DefaultMaxNumSeqs() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestHint(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  string // a part of the hint; "" means no hint
	}{
		{"max model len with an estimate", []string{"noise", maxLenLog}, "--max-model-len 38528"},
		{"max model len, older wording", []string{"ValueError: The model's max seq len (262144) is larger than the " +
			"maximum number of tokens that can be stored in KV cache (41824). Try increasing `gpu_memory_utilization` " +
			"or decreasing `max_model_len` when initializing the engine."}, "--max-model-len 41824"},
		{"GPU already in use", []string{"ValueError: Free memory on device (3.1/15.7 GiB) on startup is less than " +
			"desired GPU memory utilization (0.9, 14.1 GiB). Decrease GPU memory utilization or reduce GPU memory " +
			"used by other processes."}, "already in use"},
		{"CUDA OOM", []string{"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}, "out of GPU memory"},
		{"offline", []string{"OSError: We couldn't connect to 'https://huggingface.co' to load the files"}, "could not be downloaded"},
		{"gated", []string{"huggingface_hub.errors.GatedRepoError: 401 Client Error."}, "HF_TOKEN"},
		{"port in use", []string{"OSError: [Errno 98] Address already in use"}, "port 8101 is already in use"},
		{"bad extra arg", []string{"vllm serve: error: unrecognized arguments: --max-modl-len"}, "after --"},
		{"vLLM too old", []string{"vllm serve: error: unrecognized arguments: --enable-prompt-tokens-details"}, "too old"},
		{"no GPU", []string{"RuntimeError: No CUDA GPUs are available"}, "--engine sim"},
		{"unknown", []string{"Traceback (most recent call last):", "KeyError: 'x'"}, ""},
	}
	for _, tt := range tests {
		got := Hint(tt.lines, 8101)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s: Hint() = %q, want it to contain %q", tt.name, got, tt.want)
		}
	}
}

func TestTailWriterKeepsTheLastLines(t *testing.T) {
	var file strings.Builder
	tw := newTailWriter(&file)
	if tw.Wrote() || tw.Last() != "" {
		t.Fatal("a new tail is not empty")
	}
	for i := range 50 {
		tw.Write([]byte("line " + itoa(i) + "\n"))
	}
	tw.Write([]byte("Loading shards: 10%\rLoading shards: 90%\rpart"))
	tw.Write([]byte("ial"))
	got := tw.Lines()
	if len(got) != tailLines+1 {
		t.Fatalf("kept %d lines, want %d + the unfinished one", len(got), tailLines)
	}
	want := []string{"Loading shards: 10%", "Loading shards: 90%", "partial"}
	if diff := cmp.Diff(want, got[len(got)-3:]); diff != "" {
		t.Errorf("last lines (-want +got):\n%s", diff)
	}
	if got[0] != "line 12" {
		t.Errorf("oldest kept line = %q, want line 12", got[0])
	}
	if !strings.HasSuffix(file.String(), "90%\rpartial") || !tw.Wrote() {
		t.Error("the log file did not get the output verbatim")
	}
}

func TestStartupErrorMessage(t *testing.T) {
	e := &StartupError{Rank: 2, Port: 8102, Where: "GPU GPU-x", Cause: "exited with status 1",
		LastLines: []string{"a", "b"}, Hint: "do this", LogPath: "/run/rank-2.log"}
	want := "engine rank 2 (port 8102, GPU GPU-x) failed to start: exited with status 1\n" +
		"last lines of /run/rank-2.log:\n  | a\n  | b\nhint: do this\nfull log: /run/rank-2.log"
	if diff := cmp.Diff(want, e.Error()); diff != "" {
		t.Errorf("Error() (-want +got):\n%s", diff)
	}
}

func TestFindVLLM(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "vllm")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindVLLM(exe); err != nil || got != exe {
		t.Errorf("FindVLLM(%s) = %q, %v", exe, got, err)
	}
	_, err := FindVLLM(filepath.Join(dir, "missing"))
	if err == nil || !strings.Contains(err.Error(), "--engine sim") || !strings.Contains(err.Error(), "scripts/vllm-cpu.sh") {
		t.Errorf("missing vllm: %v", err)
	}
}

func TestVersion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"version":"0.32.0"}`)
	}))
	defer srv.Close()
	if v := Version(context.Background(), srv.URL); v != "0.32.0" {
		t.Errorf("Version = %q, want 0.32.0", v)
	}
	if v := Version(context.Background(), srv.URL+"/nothing"); v != "" {
		t.Errorf("Version of a server without /version = %q, want empty", v)
	}
}

func TestStateString(t *testing.T) {
	got := []string{Starting.String(), Loading.String(), Ready.String(), Down.String(), Stopped.String(), State(9).String()}
	if diff := cmp.Diff([]string{"starting", "loading", "healthy", "down", "stopped", "unknown"}, got); diff != "" {
		t.Error(diff)
	}
}

func TestSpecs(t *testing.T) {
	groups := [][]gpu.Device{{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}, {{Index: 2, UUID: "GPU-c"}, {Index: 3}}}
	e := Engine{Kind: "vllm", Model: "m", TP: 2}
	got := Specs(e, []int{8100, 8101}, groups, "/run/w", "HF_HUB_OFFLINE=1")
	want := []Spec{
		{Rank: 0, Port: 8100, Argv: e.Argv(8100), Env: []string{"HF_HUB_OFFLINE=1"}, LogPath: "/run/w/rank-0.log", GPUs: []string{"GPU-a", "GPU-b"}},
		{Rank: 1, Port: 8101, Argv: e.Argv(8101), Env: []string{"HF_HUB_OFFLINE=1"}, LogPath: "/run/w/rank-1.log", GPUs: []string{"GPU-c", "3"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Specs() (-want +got):\n%s", diff)
	}
	if sim := Specs(Engine{Kind: "sim", Model: "m"}, []int{1}, nil, "/l"); sim[0].GPUs != nil {
		t.Errorf("simulator spec has GPUs %v", sim[0].GPUs)
	}
}

func TestPortInUseAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	exe, _ := os.Executable()
	specs := []Spec{{Rank: 0, Port: port, Argv: []string{exe}, LogPath: filepath.Join(t.TempDir(), "r.log")}}
	_, err = Start(context.Background(), specs, Options{})
	var se *StartupError
	if !errors.As(err, &se) || !strings.Contains(se.Hint, "already in use") {
		t.Fatalf("Start on a busy port: %v", err)
	}
}

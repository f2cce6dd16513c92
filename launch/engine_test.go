package launch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/gpu"
)

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
		{"image missing (docker 20.10)", []string{"Unable to find image 'vllm/vllm-openai:v9' locally",
			"docker: Error response from daemon: pull access denied for vllm/vllm-openai, repository does not exist."}, "docker pull IMAGE"},
		{"no GPU runtime (docker)", []string{`docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].`},
			"NVIDIA Container Toolkit"},
		{"no GPU runtime (podman CDI)", []string{`Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=0`},
			"nvidia-ctk cdi generate"},
		{"no daemon", []string{"docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"},
			"start it"},
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

func TestStateString(t *testing.T) {
	got := []string{Starting.String(), Loading.String(), Ready.String(), Down.String(), Stopped.String(), State(9).String()}
	if diff := cmp.Diff([]string{"starting", "loading", "healthy", "down", "stopped", "unknown"}, got); diff != "" {
		t.Error(diff)
	}
}

func TestSpecs(t *testing.T) {
	groups := [][]gpu.Device{{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}, {{Index: 2, UUID: "GPU-c"}, {Index: 3}}}
	e := engineplan.Engine{Kind: "vllm", Model: "m", TP: 2}
	got := Specs(e.Argv, []int{8100, 8101}, groups, "/run/w", "HF_HUB_OFFLINE=1")
	want := []Spec{
		{Rank: 0, Port: 8100, Argv: e.Argv(8100), Env: []string{"HF_HUB_OFFLINE=1"}, LogPath: "/run/w/rank-0.log", GPUs: []string{"GPU-a", "GPU-b"}},
		{Rank: 1, Port: 8101, Argv: e.Argv(8101), Env: []string{"HF_HUB_OFFLINE=1"}, LogPath: "/run/w/rank-1.log", GPUs: []string{"GPU-c", "3"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Specs() (-want +got):\n%s", diff)
	}
	if sim := Specs(engineplan.Engine{Kind: "sim", Model: "m"}.Argv, []int{1}, nil, "/l"); sim[0].GPUs != nil {
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

package engineplan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContainerArgv(t *testing.T) {
	env := map[string]string{"HF_TOKEN": "hf_secret", "HF_HUB_OFFLINE": "1"}
	c := Container{Runtime: "/usr/bin/docker", Image: "vllm/vllm-openai:v0.32.0", RunID: "r1", Owner: "h/1/2",
		HFCache: "/home/u/.cache/huggingface", Getenv: func(k string) string { return env[k] }}
	e := Engine{Kind: "vllm", Model: "Qwen/Qwen3-4B-Instruct-2507", MaxNumSeqs: 256, TP: 2, Host: "0.0.0.0", MaxModelLen: "auto"}
	labels := []string{"--label", "io.lmwarden.run=r1", "--label", "io.lmwarden.rank=1", "--label", "io.lmwarden.owner=h/1/2"}
	hf := []string{"-e", "HF_HOME=/root/.cache/huggingface", "-v", "/home/u/.cache/huggingface:/root/.cache/huggingface",
		"-e", "HF_TOKEN", "-e", "HF_HUB_OFFLINE"}
	serve := []string{"Qwen/Qwen3-4B-Instruct-2507", "--host", "0.0.0.0", "--port", "8102", "--served-model-name",
		"Qwen/Qwen3-4B-Instruct-2507", "--max-num-seqs", "256", "--tensor-parallel-size", "2",
		"--enable-prompt-tokens-details", "--max-model-len", "auto"}
	join := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	head := func(runtime string) []string {
		return join([]string{runtime, "run", "--name", "warden-r1-rank1"}, labels, []string{"--ipc=host", "-p", "127.0.0.1:8102:8102"})
	}
	tests := []struct {
		name string
		c    Container
		dev  RankDevices
		want []string
	}{
		{"docker: the rank's GPUs as one --gpus device list", c, RankDevices{GPUs: []string{"2", "3"}},
			join(head("/usr/bin/docker"), []string{"--gpus", `"device=2,3"`}, hf, []string{"vllm/vllm-openai:v0.32.0"}, serve)},
		{"podman: one CDI device per GPU", func() Container { p := c; p.Runtime = "podman"; return p }(), RankDevices{GPUs: []string{"2", "3"}},
			join(head("podman"), []string{"--device", "nvidia.com/gpu=2", "--device", "nvidia.com/gpu=3"}, hf,
				[]string{"vllm/vllm-openai:v0.32.0"}, serve)},
		{"CPU: the rank's cores and binding", c, RankDevices{CPUs: []int{0, 1, 2, 3}, Env: []string{"VLLM_CPU_OMP_THREADS_BIND=0-3"}},
			join(head("/usr/bin/docker"), []string{"--cpuset-cpus", "0-3", "-e", "VLLM_CPU_OMP_THREADS_BIND=0-3"}, hf,
				[]string{"vllm/vllm-openai:v0.32.0"}, serve)},
		{"the container's id written for the watchdog", func() Container { w := c; w.CIDDir = "/logs/run"; return w }(), RankDevices{},
			join(head("/usr/bin/docker"), []string{"--cidfile", "/logs/run/warden-r1-rank1.cid"}, hf, []string{"vllm/vllm-openai:v0.32.0"}, serve)},
		{"a local model folder, read-only at the same path", func() Container { m := c; m.ModelDir = "/models/q"; return m }(), RankDevices{},
			join(head("/usr/bin/docker"), hf, []string{"-v", "/models/q:/models/q:ro", "vllm/vllm-openai:v0.32.0"}, serve)},
	}
	for _, tt := range tests {
		got := tt.c.Argv(1, 8102, tt.dev, e.ServeArgs(8102))
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
		if strings.Contains(strings.Join(got, " "), "hf_secret") {
			t.Errorf("%s: HF_TOKEN's value is in the command line", tt.name)
		}
	}
}

// TestServeArgsAreArgvAfterServe: the image's `vllm serve` entry point gets
// what a host vLLM gets after `serve`.
func TestServeArgsAreArgvAfterServe(t *testing.T) {
	e := Engine{Kind: "vllm", VLLMPath: "/v/bin/vllm", Model: "m", MaxNumSeqs: 8, Extra: []string{"--dtype", "half"}}
	if diff := cmp.Diff(e.Argv(9000)[2:], e.ServeArgs(9000)); diff != "" {
		t.Error(diff)
	}
	if got := e.ServeArgs(9000)[2]; got != "127.0.0.1" {
		t.Errorf("a host engine's --host %s", got)
	}
}

func TestImageVersionFromTag(t *testing.T) {
	for image, want := range map[string]string{
		"vllm/vllm-openai:v0.32.0": "0.32.0", "vllm/vllm-openai:0.30.1": "0.30.1", "localhost:5000/vllm:v0.29.0rc1": "0.29.0rc1",
		"vllm/vllm-openai:latest": "", "vllm/vllm-openai": "", "localhost:5000/vllm": "",
	} {
		got := ""
		if m := reTagVersion.FindStringSubmatch(image); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%s: version %q, want %q", image, got, want)
		}
	}
}

func TestFindRuntime(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := FindRuntime(""); err == nil || !strings.Contains(err.Error(), "docker or podman") {
		t.Errorf("no runtime on PATH: %v", err)
	}
	if _, err := FindRuntime("podman"); err == nil || !strings.Contains(err.Error(), "--container-runtime podman: not found") {
		t.Errorf("podman missing: %v", err)
	}
	dir := os.Getenv("PATH")
	if err := os.WriteFile(filepath.Join(dir, "podman"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindRuntime(""); err != nil || !IsPodman(got) {
		t.Errorf("podman alone on PATH: %q %v", got, err)
	}
}

func TestHostHFCache(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"HF_HOME": filepath.Join(home, "hf")}
	got, err := HostHFCache(func(k string) string { return env[k] })
	if err != nil || got != filepath.Join(home, "hf") {
		t.Fatalf("HF_HOME: %q %v", got, err)
	}
	if st, err := os.Stat(got); err != nil || !st.IsDir() {
		t.Errorf("the cache folder was not created: %v", err)
	}
	env = map[string]string{"XDG_CACHE_HOME": filepath.Join(home, "xdg")}
	if got, _ := HostHFCache(func(k string) string { return env[k] }); got != filepath.Join(home, "xdg", "huggingface") {
		t.Errorf("XDG_CACHE_HOME: %q", got)
	}
	if LocalModelDir(home) != home || LocalModelDir("Qwen/Qwen3-4B-Instruct-2507") != "" {
		t.Errorf("LocalModelDir")
	}
}

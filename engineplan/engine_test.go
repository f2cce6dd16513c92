package engineplan

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
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

// TestArgvGivesEveryRankItsTier: every rank's command line names its own
// port and the host KV tier.
func TestArgvGivesEveryRankItsTier(t *testing.T) {
	e := Engine{Kind: "vllm", Model: "m", MaxNumSeqs: 256, OffloadBytes: 48 << 30}
	for _, port := range []int{8101, 8102, 8103} {
		got := strings.Join(e.Argv(port), " ")
		if !strings.Contains(got, "--port "+strconv.Itoa(port)+" ") ||
			!strings.HasSuffix(got, "--enable-prompt-tokens-details --kv-offloading-backend native --kv-offloading-size 48") {
			t.Errorf("port %d argv %q", port, got)
		}
	}
}

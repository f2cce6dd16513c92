package engineplan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

func TestPlanOffload(t *testing.T) {
	const G = 1 << 30
	big := HostMemory{Available: 1000 * G}
	tests := []struct {
		name     string
		req      OffloadRequest
		want     uint64 // per rank
		pinned   uint64 // 0: as want
		wantWarn string // part of a warning; "" none
		wantInfo string // part of the info line
		wantErr  string // part of the error; "" none
	}{
		{name: "off", req: OffloadRequest{Setting: "off", Ranks: 4, Mem: big, Version: "0.32.0"}},
		{name: "OFF", req: OffloadRequest{Setting: "OFF", Ranks: 4, Mem: big, Version: "0.32.0"}},
		// 1000 GiB available: keep 250 GiB (25 %), 750 over 4 ranks; no card known.
		{name: "auto, a large host, no card known", req: OffloadRequest{Setting: "auto", Ranks: 4, Mem: big, Version: "0.32.0"},
			want: 187*G + 512<<20},
		// The card known: OffloadTarget x its KV cache.
		{name: "auto, sized from the card", req: OffloadRequest{Setting: "auto", Ranks: 4, Mem: big, Version: "0.32.0", CardKV: 5 * G},
			want: 20 * G, wantInfo: "a card's KV cache 5.0 GiB"},
		// 64 GiB over 4 ranks of TP 1: keep max(8, 16, 4 + 4 x 6) = 28: 36/4 = 9 GiB, under 2 x 5: no tier.
		{name: "auto, under the useful size: no tier, said", req: OffloadRequest{Setting: "auto", Ranks: 4, TP: 1,
			Mem: HostMemory{Available: 64 * G}, Version: "0.32.0", CardKV: 5 * G, CardKVFrom: "test"},
			wantInfo: "host KV tier off: --kv-offload auto finds 9.0 GiB a rank"},
		// The headroom grows with the engines' processes: 8 ranks of TP 2 keep 4 + 8 x 9 = 76 GiB.
		{name: "auto, the headroom counts every engine process", req: OffloadRequest{Setting: "auto", Ranks: 8, TP: 2,
			Mem: HostMemory{Available: 200 * G}, Version: "0.32.0"}, want: 15*G + 512<<20},
		// /dev/shm (docker's default is 64 MiB) caps vLLM's GPU engines from 0.27.
		{name: "auto, capped by /dev/shm", req: OffloadRequest{Setting: "auto", Ranks: 2, Mem: HostMemory{Available: 1000 * G,
			ShmFree: 100 * G, ShmChecked: true}, Version: "0.32.0"}, want: 45 * G},
		{name: "auto, docker's 64 MiB /dev/shm", req: OffloadRequest{Setting: "auto", Ranks: 1, Mem: HostMemory{Available: 100 * G,
			ShmFree: 64 << 20, ShmChecked: true}, Version: "0.32.0"}, wantInfo: "host KV tier off"},
		// Before 0.27 the tier is pinned tensors, not /dev/shm, rounded to a power of two per worker.
		{name: "auto, vLLM 0.26: a power of two per worker, /dev/shm not used", req: OffloadRequest{Setting: "auto", Ranks: 2, TP: 2,
			Mem: HostMemory{Available: 1000 * G, ShmFree: 1 * G, ShmChecked: true}, Version: "0.26.0", CardKV: 10 * G},
			want: 32 * G},
		{name: "a size, vLLM 0.26: what it really pins", req: OffloadRequest{Setting: "17GiB", Ranks: 1, TP: 1, Mem: big, Version: "0.26.0"},
			want: 17 * G, pinned: 32 * G, wantWarn: "vLLM 0.26.0 pins 32 GiB for a host KV tier of 17 GiB a rank"},
		{name: "a size, vLLM 0.26 at TP 2", req: OffloadRequest{Setting: "24GiB", Ranks: 1, TP: 2, Mem: big, Version: "0.26.0"},
			want: 24 * G, pinned: 32 * G, wantWarn: "--kv-offload 16 GiB would pin no more than it uses"},
		{name: "auto, version unknown: refused", req: OffloadRequest{Setting: "auto", Ranks: 1, Mem: big},
			wantErr: "version could not be read"},
		{name: "a size, version unknown: checked as 0.27+", req: OffloadRequest{Setting: "8GiB", Ranks: 1, Mem: big},
			want: 8 * G, wantWarn: "could not be read"},
		{name: "vLLM 0.13: the flags do not work yet", req: OffloadRequest{Setting: "8GiB", Ranks: 1, Mem: big, Version: "0.13.0"},
			wantErr: "work from vLLM 0.14.0"},
		{name: "a size per rank", req: OffloadRequest{Setting: "32GiB", Ranks: 4, Mem: big, Version: "0.32.0"}, want: 32 * G},
		{name: "a decimal size", req: OffloadRequest{Setting: "4GB", Ranks: 1, Mem: big, Version: "0.32.0"}, want: 4_000_000_000},
		{name: "a size under the useful one: a warning", req: OffloadRequest{Setting: "6GiB", Ranks: 1, Mem: big, Version: "0.32.0",
			CardKV: 5 * G}, want: 6 * G, wantWarn: "under 2 x a card's KV cache"},
		{name: "a size that leaves less than the headroom: a warning", req: OffloadRequest{Setting: "64GiB", Ranks: 2,
			Mem: HostMemory{Available: 150 * G}, Version: "0.32.0"},
			want: 64 * G, wantWarn: "the host KV tier (64 GiB pinned x 2 ranks) leaves less than 38 GiB of the 150 GiB available"},
		{name: "a size over /dev/shm: refused", req: OffloadRequest{Setting: "64GiB", Ranks: 2,
			Mem: HostMemory{Available: 1000 * G, ShmFree: 100 * G, ShmChecked: true}, Version: "0.32.0"},
			wantErr: "--kv-offload 64 GiB x 2 ranks needs 128 GiB in /dev/shm, which has 100 GiB free"},
		{name: "the simulator is sized as vLLM 0.32 but holds nothing", req: OffloadRequest{Setting: "auto", Ranks: 4, Sim: true,
			Mem: HostMemory{Available: 24 * G}, CardKV: 5 * G}, wantInfo: "host KV tier off"},
		{name: "zero", req: OffloadRequest{Setting: "0", Ranks: 1, Mem: big}, wantErr: "use --kv-offload off"},
		{name: "garbage", req: OffloadRequest{Setting: "lots", Ranks: 1, Mem: big}, wantErr: `--kv-offload: "lots" is not a size`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlanOffload(tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pinned := tt.pinned
			if pinned == 0 {
				pinned = tt.want
			}
			if got.PerRank != tt.want || got.Pinned != pinned {
				t.Errorf("per rank %.3f GiB pinned %.3f, want %.3f pinned %.3f", float64(got.PerRank)/G, float64(got.Pinned)/G,
					float64(tt.want)/G, float64(pinned)/G)
			}
			warns := strings.Join(got.Warn, "\n")
			if (tt.wantWarn == "") != (warns == "") || !strings.Contains(warns, tt.wantWarn) {
				t.Errorf("warnings %q, want %q", warns, tt.wantWarn)
			}
			if !strings.Contains(got.Info, tt.wantInfo) {
				t.Errorf("info %q, want %q in it", got.Info, tt.wantInfo)
			}
		})
	}
}

func TestPinnedSize(t *testing.T) {
	const G = 1 << 30
	for _, c := range []struct {
		size    uint64
		tp      int
		version string
		want    uint64
	}{
		{17 * G, 1, "0.26.0", 32 * G}, {16 * G, 1, "0.26.0", 16 * G}, {24 * G, 2, "0.22.0", 32 * G},
		{17 * G, 1, "0.27.0", 17 * G}, {17 * G, 4, "0.32.0", 17 * G}, {17 * G, 1, "", 17 * G}, {0, 1, "0.26.0", 0},
	} {
		if got := PinnedSize(c.size, c.tp, c.version); got != c.want {
			t.Errorf("PinnedSize(%d GiB, tp %d, %q) = %.2f GiB, want %.2f", c.size/G, c.tp, c.version, float64(got)/G, float64(c.want)/G)
		}
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

package sim

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

var noEnv = func(string) string { return "" }

// TP 1 is the profile as measured: every profile gives the same capacity and
// step times with TP unset, 0 or 1, and -tp 1 builds the same engine as no
// flag at all.
func TestTPOneIsTheMeasuredProfile(t *testing.T) {
	steps := []StepCost{
		{Decodes: 1, DecodeContext: 1000},
		{Decodes: 32, DecodeContext: 44000},
		{PrefillTokens: 2048, PrefillPosSum: 2048 * 2047 / 2},
		{Decodes: 8, DecodeContext: 40000, PrefillTokens: 1000, PrefillPosSum: 1000 * 5000},
	}
	for _, name := range ProfileNames() {
		p := Profiles[name]
		for _, tp := range []int{0, 1} {
			q := p.WithTP(tp)
			for _, util := range []float64{0.5, 0.85, 0.92} {
				for _, mns := range []int{32, 256} {
					if got, want := q.KVTokens(util, mns, 16), p.KVTokens(util, mns, 16); got != want {
						t.Errorf("%s TP %d: KVTokens(%v, %d) = %d, want %d", name, tp, util, mns, got, want)
					}
				}
			}
			for _, s := range steps {
				if got, want := q.StepSeconds(s), p.StepSeconds(s); got != want {
					t.Errorf("%s TP %d: StepSeconds(%+v) = %v, want exactly %v", name, tp, s, got, want)
				}
			}
			if q.AllReduceSeconds(2048) != 0 || q.CardWeightsGiB() != p.WeightsGiB || q.CardKVBytesPerToken() != p.KVBytesPerToken {
				t.Errorf("%s TP %d: all-reduce %v, card weights %v, card KV %v: want 0 and the profile's", name, tp,
					q.AllReduceSeconds(2048), q.CardWeightsGiB(), q.CardKVBytesPerToken())
			}
		}
	}
	plain, err := newServer(mustParse(t, "m"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	one, err := newServer(mustParse(t, "m", "-tp", "1"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if plain.kvTokens != 45872 || one.kvTokens != plain.kvTokens || one.numBlocks != plain.numBlocks || one.prof != plain.prof {
		t.Errorf("-tp 1: %d KV tokens, %d blocks; no flag: %d, %d (want 45,872); profiles equal %v",
			one.kvTokens, one.numBlocks, plain.kvTokens, plain.numBlocks, one.prof == plain.prof)
	}
}

func mustParse(t *testing.T, args ...string) Config {
	t.Helper()
	c, err := ParseArgs(args, noEnv)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", args, err)
	}
	return c
}

// The KV capacity of a replica spanning T cards, derived by hand from the
// profile (docs/reference-rig.md, tensor parallelism). Per card:
// 15.61 x util - weights/card - overhead, weights/card = (7.61 - 0.0625)/T +
// 0.0625 (the 64 MiB rope cache is on every rank), and each card stores its
// 8/T KV heads, 147,456/T bytes a token.
func TestTPKVCapacity(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		tp      int
		util    float64
		mns     int
		want    int
	}{
		// 14.3612 - 3.83625 - 0.45 = 10.07495 GiB a card; x 2^30 / 73,728 B =
		// 146,727.1 tokens -> 9,170 blocks of 16 = 146,720 (TP 1: 45,872;
		// 2 x 45,872 = 91,744: the freed weight memory is the rest).
		{"TP 2, max_num_seqs 32", DefaultProfile, 2, 0.92, 32, 146720},
		// 14.3612 - 3.83625 - 0.72 = 9.80495 GiB; / 73,728 B = 142,794.9 -> 142,784.
		{"TP 2, max_num_seqs 256", DefaultProfile, 2, 0.92, 256, 142784},
		// 14.3612 - (7.5475/4 + 0.0625 = 1.949375) - 0.45 = 11.961825 GiB;
		// / 36,864 B = 348,413.5 -> 21,775 blocks = 348,400.
		{"TP 4", DefaultProfile, 4, 0.92, 32, 348400},
		// The fit keeps its per-card KV memory, 38,000 x 147,456 B =
		// 5,603,328,000 B, and gains 7.61 - 3.83625 = 3.77375 GiB =
		// 4,052,033,208 B: 9,655,361,208 B / 73,728 B = 130,959.1 -> 130,944.
		{"fit, TP 2", ReferenceProfile, 2, 0.92, 32, 130944},
		// The fit ignores the utilisation at TP 2 as at TP 1.
		{"fit, TP 2, util 0.85", ReferenceProfile, 2, 0.85, 32, 130944},
	}
	for _, tc := range tests {
		p := Profiles[tc.profile]
		got := p.WithTP(tc.tp).KVTokens(tc.util, tc.mns, 16)
		if got != tc.want {
			t.Errorf("%s: %d KV tokens, want %d", tc.name, got, tc.want)
		}
		if one := p.KVTokens(tc.util, tc.mns, 16); got <= tc.tp*one {
			t.Errorf("%s: %d KV tokens, want more than %d x the single card's %d (the weights are shared out)", tc.name, got, tc.tp, one)
		}
	}
}

// Step time at TP 2: a decode step is memory bound, so half the weight read
// per card, plus 72 all-reduces that a decode step pays mostly in latency;
// the all-reduce cost grows with the step's tokens, and so does its share
// of the step up to a big prefill chunk.
func TestTPStepTime(t *testing.T) {
	p := Profiles[DefaultProfile]
	q := p.WithTP(2)
	decode := StepCost{Decodes: 8, DecodeContext: 8000}
	one, two := p.StepSeconds(decode), q.StepSeconds(decode)
	// 1.2 ms + 22.361 ms/2 + 8,000 x 0.4096 us/2 + 8 x 0.15 ms + 72 x (20 us +
	// 8 x 2560 x 2 B / 22 GB/s) = 1.2 + 11.1806 + 1.6384 + 1.2 + 1.5741 = 16.793 ms
	// (TP 1: 28.038 ms).
	if want := 16.7930e-3; math.Abs(two-want) > 1e-6 {
		t.Errorf("decode step at TP 2: %.4f ms, want %.4f ms", two*1e3, want*1e3)
	}
	if two >= one || two <= one/2 {
		t.Errorf("decode step at TP 2: %.4f ms, want between half of TP 1's and TP 1's %.4f ms", two*1e3, one*1e3)
	}
	// Up to the compute knee (W = a*N at ~172 tokens) the compute is the
	// weight read, fixed, and the all-reduce share grows with the tokens;
	// beyond it compute grows as fast as the all-reduce bytes, the share
	// levels off near (bytes/token on the link) / (a/T) ~ 20 % and attention
	// over long prompts (b) lowers it a little. Any prefill step's share is
	// above a decode step's, and the all-reduce time grows with tokens throughout.
	prefill := func(n int) StepCost { return StepCost{PrefillTokens: n, PrefillPosSum: float64(n) * float64(n-1) / 2} }
	tests := []struct {
		name      string
		cost      StepCost
		shareGrow bool // below the knee: the share must grow too
	}{
		{"decode of 8", decode, true},
		{"64-token prefill", prefill(64), true},
		{"160-token prefill", prefill(160), true},
		{"512-token prefill", prefill(512), false},
		{"2048-token prefill", prefill(2048), false},
		{"8192-token prefill", prefill(8192), false},
	}
	decodeShare := q.AllReduceSeconds(8) / two
	prevAR, prevShare := 0.0, 0.0
	for _, tc := range tests {
		ar := q.AllReduceSeconds(float64(tc.cost.Decodes + tc.cost.PrefillTokens))
		share := ar / q.StepSeconds(tc.cost)
		if ar <= prevAR || (tc.shareGrow && share <= prevShare) {
			t.Errorf("%s: all-reduce %.3f ms, %.1f %% of the step; want more than the smaller step's %.3f ms (and %.1f %%)",
				tc.name, ar*1e3, share*100, prevAR*1e3, prevShare*100)
		}
		if tc.cost.PrefillTokens > 0 && (share <= decodeShare || share >= 0.25) {
			t.Errorf("%s: all-reduce share %.1f %%, want above the decode step's %.1f %% and under 25 %% at 22 GB/s",
				tc.name, share*100, decodeShare*100)
		}
		prevAR, prevShare = ar, share
	}
	// 2048 tokens: 72 x (20 us + 2048 x 5,120 B / 22 GB/s = 476.6 us) = 35.757 ms.
	if got := q.AllReduceSeconds(2048); math.Abs(got-35.7570e-3) > 1e-6 {
		t.Errorf("all-reduce of a 2048-token step at TP 2: %.4f ms, want 35.7570 ms", got*1e3)
	}
	// A ring over 4 cards moves 2 x 3/4 of the bytes instead of 2 x 1/2.
	if r2, r4 := q.AllReduceSeconds(2048), p.WithTP(4).AllReduceSeconds(2048); r4 <= r2 {
		t.Errorf("all-reduce at TP 4 %.3f ms, want more than TP 2's %.3f ms", r4*1e3, r2*1e3)
	}
}

func TestTPArgs(t *testing.T) {
	for _, args := range [][]string{
		{"m", "-tp", "2"}, {"m", "-tp=2"}, {"m", "--tensor-parallel-size", "2"}, {"m", "--tensor-parallel-size=2"},
		{"-tp", "2", "m"},
	} {
		c, err := ParseArgs(args, noEnv)
		if err != nil || c.TP != 2 || c.Model != "m" || len(c.LogUnknown) != 0 || c.profile().TP != 2 {
			t.Errorf("ParseArgs(%q) = TP %d, model %q, unknown %q, profile TP %d, %v; want TP 2", args, c.TP, c.Model, c.LogUnknown, c.profile().TP, err)
		}
	}
	if c := mustParse(t, "m"); c.TP != 1 || c.profile().TP != 0 {
		t.Errorf("default TP %d (profile %d), want 1 and the profile as measured", c.TP, c.profile().TP)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"m", "-tp", "0"}, "--tensor-parallel-size must be at least 1, got 0"},
		{[]string{"m", "-tp", "-2"}, "--tensor-parallel-size must be at least 1, got -2"},
		{[]string{"m", "-tp", "two"}, "--tensor-parallel-size: not an integer"},
		{[]string{"m", "-tp"}, "--tensor-parallel-size needs a value"},
		{[]string{"m", "--tensor-parallel-size", "3"}, "Total number of attention heads (32) must be divisible by tensor parallel size (3)."},
		{[]string{"m", "-tp", "2", "--sim-profile", CPUTinyProfile}, "has no model shape or card-to-card link"},
	} {
		_, err := ParseArgs(tc.args, noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArgs(%q) error = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// The engine of `-tp 2` sizes its pool from both cards, says so in vLLM's
// start-up lines (per-card memory per worker, the replica's token capacity
// once) and in cache_config_info, and refuses a max_model_len beyond it.
func TestTPServer(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := newServer(mustParse(t, "m", "-tp", "2"), log)
	if err != nil {
		t.Fatal(err)
	}
	if !s.load(context.Background()) {
		t.Fatal("load")
	}
	if s.kvTokens != 146720 || s.numBlocks != 9170 {
		t.Errorf("-tp 2: %d KV tokens in %d blocks, want 146,720 in 9,170", s.kvTokens, s.numBlocks)
	}
	out := logs.String()
	for _, want := range []string{
		"tensor_parallel_size=2", "link=\"PCIe 4.0 x16 peer-to-peer, no NVLink\"",
		"msg=\"Model loading took 3.8363 GiB\" worker=TP1",
		// 146,720 x 73,728 B = 10.07 GiB on each card
		"msg=\"Available KV cache memory: 10.07 GiB\" worker=TP0", "msg=\"Available KV cache memory: 10.07 GiB\" worker=TP1",
		"GPU KV cache size: 146,720 tokens",
		"Maximum concurrency for 146,704 tokens per request: 1.00x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up log lacks %q:\n%s", want, out)
		}
	}
	rec := httptest.NewRecorder()
	s.routes().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `num_gpu_blocks="9170"`) {
		t.Errorf("/metrics lacks num_gpu_blocks=\"9170\":\n%s", rec.Body.String())
	}
	_, err = newServer(mustParse(t, "m", "-tp", "2", "--max-model-len", "200000"), slog.New(slog.DiscardHandler))
	// 200,000 x 73,728 B = 13.73 GiB needed on each card, 10.07 there.
	if err == nil || !strings.Contains(err.Error(), "(13.73 GiB KV cache is needed") ||
		!strings.Contains(err.Error(), "estimated maximum model length is 146720") {
		t.Errorf("--max-model-len 200000 at TP 2: %v, want vLLM's capacity error with per-card GiB", err)
	}
}

// The reference conversation: a ~12.5k-token working set, 3.5k of it the
// system prompt every conversation on a replica shares (prefix cache).
const (
	refShared  = 3500
	refOwn     = 9000
	refPrompt  = 7300 // the first user message
	refCtx     = 5000 // context of each decoding sequence in the decode column
	refDecodes = 8
	refRig     = 32 // sequences over the whole rig in the second decode column
)

// layoutRow is one dp x tp layout of the reference rig's four cards.
type layoutRow struct {
	dp, tp                int
	kv, kvTotal           int
	convs, convsTotal     int
	decodeMs, decodeTokS  float64
	rigTokS               float64 // decode tok/s with 32 sequences over the rig (32/dp a replica)
	prefill0, prefillWarm float64
}

// prefillSeconds is the time of a prompt of n tokens from position start on
// an idle replica, in chunks of the default 2048-token budget.
func prefillSeconds(p Profile, start, n int) float64 {
	total := 0.0
	for pos := start; pos < start+n; pos += 2048 {
		c := min(2048, start+n-pos)
		total += p.StepSeconds(StepCost{PrefillTokens: c, PrefillPosSum: float64(c)*float64(pos) + float64(c)*float64(c-1)/2})
	}
	return total
}

func layoutTable(profile string) []layoutRow {
	blocks := func(n int) int { return (n + 15) / 16 }
	var rows []layoutRow
	for _, l := range [][2]int{{4, 1}, {2, 2}, {1, 4}} {
		p := Profiles[profile].WithTP(l[1])
		r := layoutRow{dp: l[0], tp: l[1], kv: p.KVTokens(0.92, 32, 16)}
		r.kvTotal = r.dp * r.kv
		free := r.kv/16 - 1 - blocks(refShared) // null block, the shared prompt once
		r.convs = max(0, free/blocks(refOwn))
		r.convsTotal = r.dp * r.convs
		step := p.StepSeconds(StepCost{Decodes: refDecodes, DecodeContext: refDecodes * refCtx})
		r.decodeMs = step * 1e3
		r.decodeTokS = float64(r.dp*refDecodes) / step
		per := refRig / r.dp
		r.rigTokS = float64(refRig) / p.StepSeconds(StepCost{Decodes: per, DecodeContext: per * refCtx})
		r.prefill0 = prefillSeconds(p, 0, refPrompt)
		r.prefillWarm = prefillSeconds(p, refShared, refPrompt)
		rows = append(rows, r)
	}
	return rows
}

// The dp x tp trade-off of the reference rig (docs/simulator.md, tensor
// parallelism). WARDEN_TP_TABLE=1 prints it:
//
//	WARDEN_TP_TABLE=1 go test -run TPLayoutTable -v ./sim/
func TestTPLayoutTable(t *testing.T) {
	for _, profile := range []string{DefaultProfile, ReferenceProfile} {
		rows := layoutTable(profile)
		for i := 1; i < len(rows); i++ {
			a, b := rows[i-1], rows[i]
			if b.kvTotal <= a.kvTotal || b.convsTotal < a.convsTotal || b.decodeTokS >= a.decodeTokS || b.prefill0 >= a.prefill0 {
				t.Errorf("%s: %dx%d -> %dx%d: want more KV and conversations, less decode throughput, faster prefill: %+v -> %+v",
					profile, a.dp, a.tp, b.dp, b.tp, a, b)
			}
		}
		if os.Getenv("WARDEN_TP_TABLE") == "" {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s, util 0.92, max_num_seqs 32, 2048-token chunks\n", profile)
		b.WriteString("| dp x tp | KV tokens / replica | KV tokens total | conversations / replica | conversations total | decode step, 8 seqs x 5k (ms) | decode tok/s, all replicas | decode tok/s, 32 seqs x 5k over the rig | prefill 7.3k from 0 (s) | prefill 7.3k after 3.5k cached (s) |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %d x %d | %s | %s | %d | %d | %.1f | %.0f | %.0f | %.2f | %.2f |\n", r.dp, r.tp, thousands(r.kv), thousands(r.kvTotal),
				r.convs, r.convsTotal, r.decodeMs, r.decodeTokS, r.rigTokS, r.prefill0, r.prefillWarm)
		}
		t.Log(b.String())
	}
}

package model

import (
	"math"
	"testing"
)

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

package model

import (
	"strings"
	"testing"
)

func TestKVTokensFormula(t *testing.T) {
	p := Profiles[DefaultProfile]
	// docs/reference-rig.md, KV capacity: util 0.92 -> 43,904 (mns 256) / 45,872 (mns 32)
	tests := []struct {
		util float64
		mns  int
		want int
	}{
		{0.92, 256, 43904},
		{0.92, 32, 45872},
		{0.5, 32, 0},
	}
	for _, tc := range tests {
		if got := p.KVTokens(tc.util, tc.mns, 16); got != tc.want {
			t.Errorf("KVTokens(%v, %d) = %d, want %d", tc.util, tc.mns, got, tc.want)
		}
	}
}

func TestStepSecondsMatchesCalibrationExamples(t *testing.T) {
	p := Profiles[DefaultProfile]
	tests := []struct {
		name string
		cost StepCost
		want float64 // seconds, from docs/reference-rig.md, step time
	}{
		{"B=1 T=1k", StepCost{Decodes: 1, DecodeContext: 1000}, 0.024},
		{"B=1 T=16k", StepCost{Decodes: 1, DecodeContext: 16000}, 0.030},
		{"B=32 T=44k", StepCost{Decodes: 32, DecodeContext: 44000}, 0.046},
		{"2k prefill from 0", StepCost{PrefillTokens: 2048, PrefillPosSum: 2048 * 2047 / 2}, 0.287},
	}
	for _, tc := range tests {
		got := p.StepSeconds(tc.cost)
		if got < tc.want*0.95 || got > tc.want*1.05 {
			t.Errorf("%s: %.4f s, want %.3f s ±5%%", tc.name, got, tc.want)
		}
	}
	half := p
	half.DecodeGBps = 180
	slow := half.StepSeconds(StepCost{Decodes: 1, DecodeContext: 1000})
	if fast := p.StepSeconds(StepCost{Decodes: 1, DecodeContext: 1000}); slow <= fast*1.8 {
		t.Errorf("halving decode bandwidth: %.4f s vs %.4f s, want about double", slow, fast)
	}
}

func TestKVCapacityErrorWording(t *testing.T) {
	err := KVCapacityError(262144, 45872, 147456)
	for _, want := range []string{"max seq len (262144)", "36.00 GiB KV cache is needed", "(6.30 GiB)", "estimated maximum model length is 45872", "`max_model_len`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

package sim

import (
	"log/slog"
	"math"
	"testing"

	"github.com/lmwarden/warden/sim/model"
)

func TestReferenceProfileIsTheFit(t *testing.T) {
	phys := model.Profiles[model.DefaultProfile]
	for _, tc := range []struct {
		name        string
		kv, kv48    int
		gbps, scale float64
	}{
		{model.ReferenceProfile, 38000, 37968, 360, 2},
		{model.ReferenceProfileV1, 40000, 39984, 310, 1},
	} {
		fit := model.Profiles[tc.name]
		for _, util := range []float64{0.85, 0.92, 0.95} {
			if got := fit.KVTokens(util, 32, 16); got != tc.kv {
				t.Errorf("%s: KVTokens(util %v) = %d, want the fitted %d", tc.name, util, got, tc.kv)
			}
		}
		if got := fit.KVTokens(0.92, 32, 48); got != tc.kv48 {
			t.Errorf("%s: KVTokens with 48-token blocks = %d, want whole blocks (%d)", tc.name, got, tc.kv48)
		}
		// Same hardware otherwise: a batch-1 decode step at 1k context is
		// t0 + W + k*1000 + c at the fitted bandwidth, and a prefill step
		// costs the physical one's compute times the prefill scale.
		step := model.StepCost{Decodes: 1, DecodeContext: 1000}
		want := fit.T0 + 8.05e9/(tc.gbps*1e9) + 147456.0/(tc.gbps*1e9)*1000 + fit.C
		if got := fit.StepSeconds(step); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: decode step %.6f s, want %.6f (%v GB/s)", tc.name, got, want, tc.gbps)
		}
		pre := model.StepCost{PrefillTokens: 2048, PrefillPosSum: 2048 * 4096}
		got, want := fit.StepSeconds(pre)-fit.T0, tc.scale*(phys.StepSeconds(pre)-phys.T0)
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: prefill step %.6f s beyond t0, want %.6f (%v x physical)", tc.name, got, want, tc.scale)
		}
		c, err := ParseArgs([]string{"m", "--sim-profile", tc.name}, func(string) string { return "" })
		if err != nil || c.Profile != tc.name {
			t.Errorf("--sim-profile %s: %v", tc.name, err)
		}
	}
}

// The calibration knobs reach the engine's time model: --sim-prefill-scale
// multiplies both prefill coefficients, --sim-decode-gbps replaces the
// bandwidth, and the profile table itself is left alone.
func TestCalibrationKnobs(t *testing.T) {
	base := model.Profiles[model.DefaultProfile]
	cfg, err := ParseArgs([]string{"m", "--sim-prefill-scale", "2", "--sim-decode-gbps", "300"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	pre := model.StepCost{PrefillTokens: 2048, PrefillPosSum: 2048 * 4096}
	if got, want := s.prof.StepSeconds(pre)-s.prof.T0, 2*(base.StepSeconds(pre)-base.T0); math.Abs(got-want) > 1e-9 {
		t.Errorf("prefill step at scale 2: %.6f s beyond t0, want %.6f", got, want)
	}
	if s.prof.DecodeGBps != 300 || model.Profiles[model.DefaultProfile] != base {
		t.Errorf("bandwidth %v (want 300); profile table changed: %v", s.prof.DecodeGBps, model.Profiles[model.DefaultProfile] != base)
	}
	if _, err := ParseArgs([]string{"m", "--sim-prefill-scale", "-1"}, func(string) string { return "" }); err == nil {
		t.Error("negative --sim-prefill-scale accepted")
	}
}

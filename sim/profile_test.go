package sim

import (
	"math"
	"testing"
)

func TestReferenceProfileIsTheFit(t *testing.T) {
	phys, fit := Profiles[DefaultProfile], Profiles[ReferenceProfile]
	for _, util := range []float64{0.85, 0.92, 0.95} {
		if got := fit.KVTokens(util, 32, 16); got != 40000 {
			t.Errorf("fit KVTokens(util %v) = %d, want the fitted 40000", util, got)
		}
	}
	if got := fit.KVTokens(0.92, 32, 48); got != 39984 {
		t.Errorf("fit KVTokens with 48-token blocks = %d, want whole blocks (39984)", got)
	}
	// Same hardware otherwise; only the decode bandwidth differs: a batch-1
	// decode step at 1k context is t0 + W + k*1000 + c.
	step := StepCost{Decodes: 1, DecodeContext: 1000}
	want := fit.T0 + 8.05e9/310e9 + 147456.0/310e9*1000 + fit.C
	if got := fit.StepSeconds(step, 0); math.Abs(got-want) > 1e-9 {
		t.Errorf("fit decode step %.6f s, want %.6f (310 GB/s)", got, want)
	}
	if fit.StepSeconds(step, 0) <= phys.StepSeconds(step, 0) {
		t.Errorf("fit decode step not slower than the physical profile's")
	}
	pre := StepCost{PrefillTokens: 2048, PrefillPosSum: 2048 * 4096}
	if fit.StepSeconds(pre, 0) != phys.StepSeconds(pre, 0) {
		t.Errorf("prefill steps differ between the fit and the physical profile")
	}
	c, err := ParseArgs([]string{"m", "--sim-profile", ReferenceProfile}, func(string) string { return "" })
	if err != nil || c.Profile != ReferenceProfile {
		t.Errorf("--sim-profile %s: %v", ReferenceProfile, err)
	}
}

package sim_test

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/sim"
)

// TestFirstContactSaysWhatTheSimulatorAnswers: the note says the answers
// are filler, how long they run by default and how to shorten them, and
// follows --sim-output-tokens and --sim-time-scale.
func TestFirstContactSaysWhatTheSimulatorAnswers(t *testing.T) {
	t.Setenv("WARDEN_SIM_OUTPUT_TOKENS", "")
	t.Setenv("WARDEN_SIM_TIME_SCALE", "")
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{nil, []string{"filler text", "median 252 tokens", "--sim-output-tokens 20"}, []string{"simulated time"}},
		{[]string{"--sim-output-tokens", "8"}, []string{"filler text", "each answer is 8 tokens long"}, []string{"median", "a minute"}},
		{[]string{"--sim-time-scale=10", "--max-model-len", "8k"}, []string{"runs 10 x wall time", "median"}, nil},
		{[]string{"--sim-time-scale", "-1"}, nil, []string{"filler"}}, // refused by the engines, which say why
	} {
		got := strings.Join(sim.FirstContact(tc.args), "\n")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("FirstContact(%q) = %q, want %q in it", tc.args, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("FirstContact(%q) = %q, want no %q", tc.args, got, n)
			}
		}
	}
}

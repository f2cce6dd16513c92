package replay

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/router/place"
)

// The replay's asserting cases. Its explorations print tables and assert
// nothing: they are not tests but Explorations, run by
// `go run ./sim/replay/cmd/replay NAME`.

// TestReplayAdmission: with mixed conversation lengths at 16 sessions the
// working sets overflow the KV by a little; holding new conversations
// until they fit beats both sticky and off on TTFB p95, output and prefix
// hits. Below that nothing is held and the policy is the sticky rule.
func TestReplayAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 3 policies x 3 stages")
	}
	run := func(pol string) []replayResult {
		l := mixedLoad(pol)
		l.stages = []int{4, 8, 16}
		return l.runAll()
	}
	ad, st, off := run(place.PolicyAdaptive), run(place.PolicySticky), run(place.PolicyOff)
	for i, n := range []int{4, 8, 16} {
		t.Logf("%d sessions\nadaptive %v\nsticky   %v\noff      %v", n, ad[i], st[i], off[i])
		if ad[i].hitPct < st[i].hitPct-1 || ad[i].outPerMin < 0.97*st[i].outPerMin {
			t.Errorf("%d sessions: adaptive worse than sticky on hits or output", n)
		}
	}
	a, s, o := ad[2], st[2], off[2]
	if a.p95 >= min(s.p95, o.p95) || a.outPerMin <= max(s.outPerMin, o.outPerMin) || a.hitPct <= s.hitPct {
		t.Errorf("16 sessions: adaptive does not beat sticky and off on p95, output and hits")
	}
}

// TestReplayHostTier: the replay drives the simulator's host KV tier, so
// routing research sees reloads as the simulator does. At 24 reference
// sessions the working sets overflow four cards' KV (every policy
// re-prefills nearly every turn); a 16 GiB tier per replica (three times a
// card's KV) serves most of that from host memory, as the simulated
// reference rig measured (docs/kv-offload.md: output +60 %, p50 halved).
// hitPct is the GPU prefix cache's (vLLM counts host hits apart); the
// prompt tokens computed fall instead.
func TestReplayHostTier(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 2 runs of 24 sessions")
	}
	run := func(gib float64) replayResult {
		l := refLoad(place.PolicyAdaptive, 24)
		l.hostGiB = gib
		return l.run()
	}
	none, tier := run(0), run(16)
	t.Logf("no tier: %v\n16 GiB:  %v", none, tier)
	perTurn := func(r replayResult) float64 { return float64(r.computed) / float64(max(r.turns, 1)) }
	if perTurn(tier) > 0.5*perTurn(none) || tier.outPerMin < 1.3*none.outPerMin || tier.p50 >= 0.75*none.p50 {
		t.Errorf("the tier does not show: computed prompt tokens a turn %.0f -> %.0f, output %.0f -> %.0f, p50 %.2f -> %.2f s",
			perTurn(none), perTurn(tier), none.outPerMin, tier.outPerMin, none.p50, tier.p50)
	}
}

// TestExplorationsRefuseBadSettings: a setting that does not parse, an
// unknown profile or policy stops an exploration before it replays
// anything, with an error that names the variable; the explorations have
// distinct names and say what they read.
func TestExplorationsRefuseBadSettings(t *testing.T) {
	byName := map[string]Exploration{}
	for _, e := range Explorations() {
		if _, dup := byName[e.Name]; dup || e.Doc == "" {
			t.Errorf("exploration %q: a second of that name, or no doc", e.Name)
		}
		byName[e.Name] = e
	}
	for _, tc := range []struct{ exploration, name, value, want string }{
		{"calibrate", "CAL_KV", "40000,4OOOO", `CAL_KV=40000,4OOOO: "4OOOO" is not a number`},
		{"router-verdict", "CAL_THIRD", "stickyy", `CAL_THIRD: unknown policy "stickyy"`},
		{"quantum", "QUANTUM_POLICY", "of", `QUANTUM_POLICY: unknown policy "of"`},
		{"explore", "WARDEN_REPLAY_PROFILE", "a4000", "WARDEN_REPLAY_PROFILE=a4000: no such simulator profile"},
		{"imposed-homes", "CAL_SEEDS", "0", "CAL_SEEDS=0: give at least 1"},
	} {
		e, ok := byName[tc.exploration]
		if !ok {
			t.Fatalf("no exploration %q", tc.exploration)
		}
		var out strings.Builder
		err := e.Run(&out, func(k string) string {
			if k == tc.name {
				return tc.value
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) || out.Len() > 0 {
			t.Errorf("%s with %s=%s: error %v, printed %q; want %q and nothing printed", tc.exploration, tc.name, tc.value, err, out.String(), tc.want)
		}
	}
}

package router_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/lmwarden/warden/router"
)

// TestSubagentsPlacedOnTheirOwnMerits: a subagent's requests carry its
// parent's session id plus an agent id (Claude Code), or the root's
// session-id with a thread-id of their own (Codex). Each subagent is a
// conversation of its own, placed by load (here: onto the replicas its
// parent does not occupy) and sticky from then on; the status counts them.
// With SubagentsWithParent they share the parent's replica, as before.
func TestSubagentsPlacedOnTheirOwnMerits(t *testing.T) {
	const parent = "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c"
	claude := func(agent string) []string {
		h := []string{"X-Claude-Code-Session-Id", parent}
		if agent != "" {
			h = append(h, "X-Claude-Code-Agent-Id", agent)
		}
		return h
	}
	codex := func(thread string) []string {
		return []string{"Session-Id", parent, "Thread-Id", thread, "X-Codex-Parent-Thread-Id", parent}
	}
	for _, tc := range []struct {
		name    string
		headers func(string) []string
		agents  []string
	}{
		{"claude-code", claude, []string{"a31370cd13e9c38d2", "a0000000000000001", "a0000000000000002"}},
		{"codex", codex, []string{"019a-child-1", "019a-child-2", "019a-child-3"}},
	} {
		for _, withParent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/with-parent=%v", tc.name, withParent), func(t *testing.T) {
				engines := []*fakeEngine{newFakeEngine(t), newFakeEngine(t), newFakeEngine(t), newFakeEngine(t)}
				p, front := testProxy(t, testConfig{Config: router.Config{Policy: "sticky", SubagentsWithParent: withParent, Seed: 3}}, engines...)
				turn := func(h []string) int {
					t.Helper()
					resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("", false, ""), h...)
					if resp.StatusCode != 200 {
						t.Fatalf("%d %s", resp.StatusCode, body)
					}
					rank, err := strconv.Atoi(resp.Header.Get("X-Warden-Replica"))
					if err != nil {
						t.Fatal(err)
					}
					return rank
				}
				home := turn(tc.headers("")) // the parent (a Codex root sends no thread-id of its own here)
				used := map[int]bool{home: true}
				for _, a := range tc.agents {
					first := turn(tc.headers(a))
					for range 2 {
						if again := turn(tc.headers(a)); again != first {
							t.Errorf("subagent %s moved from %d to %d", a, first, again)
						}
					}
					switch {
					case withParent && first != home:
						t.Errorf("with its parent: subagent %s went to %d, parent on %d", a, first, home)
					case !withParent && used[first]:
						t.Errorf("on its own merits: subagent %s went to %d, already busy (%v)", a, first, used)
					}
					used[first] = true
				}
				if again := turn(tc.headers("")); again != home {
					t.Errorf("the parent moved from %d to %d", home, again)
				}
				st := coreOf(p).Status()
				want := len(tc.agents)
				if withParent {
					want = 0
				}
				perReplica := 0
				for _, r := range st.Replicas {
					perReplica += r.ActiveSubagents
				}
				if st.SubagentSessions != want || perReplica != want || st.SubagentsSeen != uint64(want) {
					t.Errorf("status: %d subagent conversations (replicas %d, seen %d), want %d",
						st.SubagentSessions, perReplica, st.SubagentsSeen, want)
				}
			})
		}
	}
}

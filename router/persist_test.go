package router_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
)

func TestSessionTableSurvivesARestartKeyedByURL(t *testing.T) {
	e0, e1, e2 := newFakeEngine(t), newFakeEngine(t), newFakeEngine(t)
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicySticky, Clock: clk.now, SessionTTL: time.Hour}}, e0, e1, e2)
	sessions := []string{"a", "b", "c", "d", "e", "f", "old"}
	home, _ := homes(t, front.URL, sessions[len(sessions)-1:])
	clk.add(50 * time.Minute) // "old" is 50 minutes idle at save time
	for k, v := range must(homes(t, front.URL, sessions[:len(sessions)-1])) {
		home[k] = v
	}
	urlOf := map[string]string{"0": e0.srv.URL, "1": e1.srv.URL, "2": e2.srv.URL}
	path := filepath.Join(t.TempDir(), "state", "sessions.json")
	n, err := coreOf(p).SaveSessions(path)
	if err != nil || n != len(sessions) {
		t.Fatalf("SaveSessions = %d, %v; want %d", n, err, len(sessions))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file: %v mode %v, want 0600", err, fi.Mode())
	}

	// The restarted warden lists the replicas in another order (other
	// ranks), has lost e2, and starts 20 minutes later: "old" is then past
	// its TTL.
	clk.add(20 * time.Minute)
	q, front2 := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicySticky, Clock: clk.now, SessionTTL: time.Hour}}, e1, e0)
	res, err := coreOf(q).LoadSessions(path)
	if err != nil {
		t.Fatal(err)
	}
	onE2 := 0
	for _, s := range sessions[:len(sessions)-1] {
		if home[s] == "2" {
			onE2++
		}
	}
	want := router.LoadResult{Restored: len(sessions) - 1 - onE2, Expired: 1, Unknown: onE2, SavedAt: time.Unix(1_000_000, 0).Add(50 * time.Minute).UTC()}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("LoadResult (-want +got):\n%s", diff)
	}
	if st := coreOf(q).Status(); st.Sessions != want.Restored || st.SessionsSeen != 0 {
		t.Errorf("after load: %d sessions, %d seen; want %d restored and none seen in this run", st.Sessions, st.SessionsSeen, want.Restored)
	}
	newURL := map[string]string{"0": e1.srv.URL, "1": e0.srv.URL}
	rank, route := homes(t, front2.URL, sessions[:len(sessions)-1])
	for _, s := range sessions[:len(sessions)-1] {
		switch {
		case home[s] == "2" && route[s] != "new":
			t.Errorf("session %s was on the lost replica: route %s, want new", s, route[s])
		case home[s] != "2" && (route[s] != "sticky" || newURL[rank[s]] != urlOf[home[s]]):
			t.Errorf("session %s: %s on %s, want sticky on %s", s, route[s], newURL[rank[s]], urlOf[home[s]])
		}
	}
}

// must drops the second result of a two-result helper.
func must[A, B any](a A, _ B) A { return a }

func TestSavedSessionsKeepOrderContextAndUsage(t *testing.T) {
	e0 := newFakeEngine(t)
	clk := &fakeClock{t: time.Unix(2_000_000, 0)}
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicySticky, Clock: clk.now}}, e0)
	for _, s := range []string{"first", "second", "third"} {
		post(t, front.URL+"/v1/chat/completions", chatBody(s, false, ""))
		clk.add(time.Second)
	}
	settled(t, p)
	path := filepath.Join(t.TempDir(), "s.json")
	if _, err := coreOf(p).SaveSessions(path); err != nil {
		t.Fatal(err)
	}
	var st struct { // the state file's schema (router/persist.go)
		Sessions []struct {
			Key, Replica   string
			Context        uint32
			Prompt, Cached uint64
		}
	}
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range st.Sessions {
		keys = append(keys, s.Key)
		if s.Replica != coreOf(p).Lookup(0).URL().String() || s.Context != 103 || s.Prompt != 100 || s.Cached != 64 {
			t.Errorf("saved %+v, want replica %s, context 103, prompt 100, cached 64", s, e0.srv.URL)
		}
	}
	if len(keys) != 3 || !strings.HasSuffix(keys[0], "first") || !strings.HasSuffix(keys[2], "third") {
		t.Errorf("saved order %v, want least recently used first", keys)
	}

	q, _ := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicySticky, Clock: clk.now, MaxSessions: 2}}, e0)
	if _, err := coreOf(q).LoadSessions(path); err != nil {
		t.Fatal(err)
	}
	var firstKept bool
	var ctxSum uint64
	coreOf(q).Placer().Sessions(func(tab *place.Table) {
		firstKept = tab.Peek(keys[0]) != nil
		ctxSum, _ = tab.Contexts()
	})
	if firstKept || coreOf(q).Status().Sessions != 2 || ctxSum != 2*103 {
		t.Errorf("into a table of 2: first kept %v, %d sessions, context sum %d; want the 2 most recent, 206", firstKept, coreOf(q).Status().Sessions, ctxSum)
	}
}

func TestLoadSessionsMissingOrDamagedFile(t *testing.T) {
	p, _ := testProxy(t, testConfig{}, newFakeEngine(t))
	dir := t.TempDir()
	if res, err := coreOf(p).LoadSessions(filepath.Join(dir, "none.json")); err != nil || res != (router.LoadResult{}) {
		t.Errorf("missing file: %+v %v, want nothing and no error", res, err)
	}
	for name, body := range map[string]string{
		"damaged": `{"version":1,"sessions":[{"key":`,
		"version": `{"version":99,"sessions":[]}`,
	} {
		path := filepath.Join(dir, name+".json")
		os.WriteFile(path, []byte(body), 0o600)
		if _, err := coreOf(p).LoadSessions(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s file: error %v, want one naming %s", name, err, path)
		}
	}
	if _, err := coreOf(p).SaveSessions(filepath.Join(dir, "damaged.json", "under-a-file")); err == nil {
		t.Error("saving under a regular file succeeded")
	}
}

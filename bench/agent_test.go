package bench

import (
	"bytes"
	"encoding/csv"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

func TestParseToolTime(t *testing.T) {
	for in, want := range map[string]ToolTime{
		"":            {},
		"0":           {},
		"2s":          {Median: 2 * time.Second, P90: 2 * time.Second},
		"2s,20s":      {Median: 2 * time.Second, P90: 20 * time.Second},
		" 3s, 30s,2m": {Median: 3 * time.Second, P90: 30 * time.Second, Max: 2 * time.Minute},
	} {
		got, err := parseToolTime(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"2", "x,3s", "20s,2s", "3s,30s,1s", "3s,30s,2h", "-1s", "1s,2s,3s,4s", "0,5s"} {
		if _, err := parseToolTime(bad); err == nil || !strings.Contains(err.Error(), "--tool-time") {
			t.Errorf("%q: err %v, want one naming --tool-time", bad, err)
		}
	}
}

func TestParseSubagents(t *testing.T) {
	got, err := parseSubagents("0.25, 2,3")
	want := Subagents{Share: 0.25, N: 2, Turns: 3, SystemTokens: DefaultAgentSystemTokens, TaskMin: DefaultAgentTaskMin, TaskMax: DefaultAgentTaskMax}
	if err != nil || got != want {
		t.Errorf("0.25,2,3: %+v, %v", got, err)
	}
	for _, none := range []string{"", "0", "none", "0,2,3"} {
		if got, err := parseSubagents(none); err != nil || got.enabled() {
			t.Errorf("%q: %+v, %v; want none", none, got, err)
		}
	}
	for _, bad := range []string{"0.25", "0.25,2", "1.5,2,3", "-0.1,2,3", "0.5,0,3", "0.5,100,3", "0.5,2,-1", "a,2,3", "NaN,2,3"} {
		if _, err := parseSubagents(bad); err == nil || !strings.Contains(err.Error(), "--subagents") {
			t.Errorf("%q: err %v, want one naming --subagents", bad, err)
		}
	}
}

// The pauses are a log-normal with the given median and p90, cut at the
// max, and a function of seed, session and turn alone.
func TestToolTimeDraws(t *testing.T) {
	c := DefaultConfig()
	c.ToolTime = ToolTime{Median: 3 * time.Second, P90: 30 * time.Second}
	var ds []float64
	for k := range 4000 {
		ds = append(ds, c.toolPause([]any{8, k}, -1, 1).Seconds())
	}
	slices.Sort(ds)
	if med, p90 := quantile(ds, 0.5), quantile(ds, 0.9); med < 2.7 || med > 3.3 || p90 < 26 || p90 > 34 {
		t.Errorf("median %.2fs p90 %.2fs over 4000 draws, want about 3s and 30s", med, p90)
	}
	again := c.toolPause([]any{8, 17}, -1, 3)
	if again != c.toolPause([]any{8, 17}, -1, 3) {
		t.Errorf("one seed, session and turn gave two pauses")
	}
	if again == c.toolPause([]any{8, 17}, -1, 4) || again == c.toolPause([]any{8, 17}, 0, 3) {
		t.Errorf("another turn or a subagent drew the same pause %v", again)
	}
	other := c
	other.Seed = 2
	if again == other.toolPause([]any{8, 17}, -1, 3) {
		t.Errorf("another seed drew the same pause %v", again)
	}
	c.ToolTime.Max = 10 * time.Second
	for k := range 500 {
		if d := c.toolPause([]any{8, k}, -1, 1); d > 10*time.Second || d <= 0 {
			t.Fatalf("pause %v with max 10s", d)
		}
	}
	c.ToolTime = ToolTime{Median: time.Second, P90: time.Second}
	if d := c.toolPause([]any{8, 3}, -1, 1); d != time.Second {
		t.Errorf("fixed pause drew %v", d)
	}
}

var agentIDRe = regexp.MustCompile(`^a[0-9a-f]{16}$`)

func TestSubagentDraws(t *testing.T) {
	c := DefaultConfig()
	c.Subagents = agentSubagents
	spawned := 0
	for k := range 4000 {
		spawned += btoi(c.spawns([]any{"series", k}))
	}
	if spawned < 900 || spawned > 1100 {
		t.Errorf("%d of 4000 sessions spawn with share 0.25", spawned)
	}
	ids := map[string]bool{}
	for k := range 50 {
		for j := range 3 {
			id := c.agentID([]any{"series", k}, j)
			if !agentIDRe.MatchString(id) || ids[id] {
				t.Fatalf("agent id %q: not a + 16 hex, or repeated", id)
			}
			ids[id] = true
			if id != c.agentID([]any{"series", k}, j) {
				t.Fatalf("agent id not deterministic")
			}
			if n := c.agentTaskTokens([]any{"series", k}, j); n < DefaultAgentTaskMin || n > DefaultAgentTaskMax {
				t.Fatalf("task of %d tokens", n)
			}
		}
	}
	other := c
	other.Seed = 7
	if c.agentID([]any{"series", 1}, 0) == other.agentID([]any{"series", 1}, 0) {
		t.Errorf("agent ids do not depend on the seed")
	}
	c.Subagents.Share = 0
	if c.spawns([]any{"series", 1}) {
		t.Errorf("share 0 spawns")
	}
}

// configOf reads options the way the command does: the flags' defaults
// with a target, then edit's changes (nil: none).
func configOf(t *testing.T, edit func(*Options)) (Config, error) {
	t.Helper()
	o := DefaultOptions()
	o.URL = "http://127.0.0.1:1"
	if edit != nil {
		edit(&o)
	}
	return o.Config()
}

// TestLoadFlags: --load's presets and the flags given over them (their
// variables reach Options as flags do: command's TestBenchLoadFromTheEnvironment).
func TestLoadFlags(t *testing.T) {
	cfg, err := configOf(t, nil)
	if err != nil || cfg.Load != "" || cfg.ToolTime.enabled() || cfg.Subagents.enabled() || cfg.Mix != nil {
		t.Fatalf("default: %+v %+v %v, %v; want the reference load", cfg.ToolTime, cfg.Subagents, cfg.Mix, err)
	}
	cfg, err = configOf(t, func(o *Options) { o.Load = "agent" })
	if err != nil || cfg.Load != LoadAgent || cfg.ToolTime != agentToolTime || cfg.Subagents != agentSubagents ||
		!cmp.Equal(cfg.Mix, agentMix) {
		t.Fatalf("--load agent: %+v %+v %v, %v", cfg.ToolTime, cfg.Subagents, cfg.Mix, err)
	}
	cfg, err = configOf(t, func(o *Options) {
		o.Load, o.ToolTime, o.ToolTimeSet, o.Subagents, o.SubagentsSet, o.Mix, o.MixSet = "agent", "0", true, "0.5,3,1", true, "", true
	})
	if err != nil || cfg.ToolTime.enabled() || cfg.Subagents.N != 3 || cfg.Subagents.Share != 0.5 || cfg.Mix != nil {
		t.Fatalf("explicit flags over --load agent: %+v %+v %v, %v", cfg.ToolTime, cfg.Subagents, cfg.Mix, err)
	}
	cfg, err = configOf(t, func(o *Options) { o.Load, o.ToolTime, o.ToolTimeSet = "agent", "1s,5s", true })
	if err != nil || cfg.ToolTime != (ToolTime{Median: time.Second, P90: 5 * time.Second}) || cfg.Subagents != agentSubagents {
		t.Fatalf("--load agent --tool-time 1s,5s: %+v %+v, %v", cfg.ToolTime, cfg.Subagents, err)
	}
	for flag, edit := range map[string]func(*Options){
		"--load":      func(o *Options) { o.Load = "swarm" },
		"--tool-time": func(o *Options) { o.ToolTime, o.ToolTimeSet = "20s,2s", true },
		"--subagents": func(o *Options) { o.Subagents, o.SubagentsSet = "1.5,2,3", true },
	} {
		if _, err := configOf(t, edit); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: err %v, want one naming it", flag, err)
		}
	}
}

// With --tool-time, a session's next request reaches the engine no sooner
// than the drawn pause after its previous reply was done.
func TestToolTimeSpacesTurns(t *testing.T) {
	f, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 2)
	cfg.TimeScale = 50
	cfg.Turns = 3
	cfg.Stage = 30 * time.Second // 0.6 s of wall time
	cfg.Drain = 100 * time.Second
	cfg.ToolTime = ToolTime{Median: 2 * time.Second, P90: 8 * time.Second, Max: 15 * time.Second}
	res := runBench(t, cfg, false)
	stream := map[string][]any{} // session id -> its draws' stream
	for _, tr := range res.Turns {
		if tr.Error != "" {
			t.Fatalf("turn failed: %s", tr.Error)
		}
		stream[tr.SessionID] = []any{tr.Sessions, tr.Session}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	bySession := map[string][]fakeReq{}
	for _, r := range f.reqs {
		sid := r.Header.Get("X-Claude-Code-Session-Id")
		bySession[sid] = append(bySession[sid], r)
	}
	gaps := 0
	for sid, reqs := range bySession {
		for i := 1; i < len(reqs); i++ {
			if reqs[i-1].Done.IsZero() {
				t.Fatalf("session %s: turn %d started before turn %d was answered", sid, i+1, i)
			}
			want := cfg.wall(cfg.toolPause(stream[sid], -1, i))
			if got := reqs[i].At.Sub(reqs[i-1].Done); got < want {
				t.Errorf("session %s: turn %d arrived %v after turn %d's reply, want >= the drawn pause %v", sid, i+1, got, i, want)
			}
			gaps++
		}
	}
	if gaps < 2 {
		t.Fatalf("only %d gaps between turns to check", gaps)
	}
	// The records show the pause too, in simulated time.
	recs := map[string][]TurnRecord{}
	for _, tr := range res.Turns {
		recs[tr.SessionID] = append(recs[tr.SessionID], tr)
	}
	for sid, rs := range recs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Turn < rs[j].Turn })
		for i := 1; i < len(rs); i++ {
			want := cfg.toolPause(stream[sid], -1, rs[i-1].Turn).Seconds()
			if got := rs[i].StartS - rs[i-1].StartS - rs[i-1].DurationS; got < want-1e-6 {
				t.Errorf("session %s: records show %.3fs between turns %d and %d, want >= %.3fs", sid, got, rs[i-1].Turn, rs[i].Turn, want)
			}
		}
	}
}

// A session pausing for its tools is cut off at the stage end, not after
// the pause or the drain.
func TestToolTimeEndsWithStage(t *testing.T) {
	_, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 2)
	cfg.Stage = 300 * time.Millisecond
	cfg.Drain = 10 * time.Second
	cfg.ToolTime = ToolTime{Median: time.Hour, P90: time.Hour}
	start := time.Now()
	res := runBench(t, cfg, false)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the stage took %v: a pause outlived it", took)
	}
	for _, tr := range res.Turns {
		if tr.Turn > 1 {
			t.Fatalf("turn %d sent within a 1h pause", tr.Turn)
		}
	}
}

// Subagents: requests with the parent's session id and their own agent ids,
// in parallel; the parent's next turn comes after their last turns and
// carries their final replies.
func TestSubagents(t *testing.T) {
	for _, api := range []API{APIAnthropic, APIOpenAI} {
		t.Run(string(api), func(t *testing.T) {
			f, srv := newFake(t, true)
			f.tag = true
			f.between = 5 * time.Millisecond
			cfg := smallConfig(srv.URL, 2)
			cfg.API = api
			cfg.Turns = 2
			cfg.Stage = 700 * time.Millisecond
			cfg.Subagents = Subagents{Share: 1, N: 3, Turns: 2, SystemTokens: 100, TaskMin: 50, TaskMax: 200}
			res := runBench(t, cfg, false)
			checkSubagents(t, f, cfg, res, api)
		})
	}
}

func checkSubagents(t *testing.T, f *fakeServer, cfg Config, res *Results, api API) {
	t.Helper()
	stream := map[string][]any{}
	for _, tr := range res.Turns {
		if tr.Error != "" {
			t.Fatalf("turn failed: %s", tr.Error)
		}
		stream[tr.SessionID] = []any{tr.Sessions, tr.Session}
		if tr.Subagent != (tr.AgentID != "") {
			t.Fatalf("record subagent %v with agent id %q", tr.Subagent, tr.AgentID)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != 0 {
		t.Errorf("%d turns did not extend their conversation", f.broken)
	}
	type conv struct {
		parent []fakeReq
		agents map[string][]fakeReq
	}
	convs := map[string]*conv{}
	parentSystem, agentSystem := map[string]bool{}, map[string]bool{}
	for _, r := range f.reqs {
		sid := sessionOf(&http.Request{Header: r.Header}, api)
		if api == APIAnthropic {
			if got := gjson.Parse(gjson.GetBytes(r.Body, "metadata.user_id").String()).Get("session_id").String(); got != sid {
				t.Fatalf("metadata session_id %q, header %q", got, sid)
			}
		} else if got := gjson.GetBytes(r.Body, "prompt_cache_key").String(); got != sid {
			t.Fatalf("prompt_cache_key %q, session-id %q", got, sid)
		}
		c := convs[sid]
		if c == nil {
			c = &conv{agents: map[string][]fakeReq{}}
			convs[sid] = c
		}
		system := gjson.GetBytes(r.Body, "system.0.text").String()
		if api == APIOpenAI {
			system = gjson.GetBytes(r.Body, "messages.0.content").String()
		}
		if a := r.Header.Get(AgentHeader); a != "" {
			c.agents[a] = append(c.agents[a], r)
			agentSystem[system] = true
		} else {
			c.parent = append(c.parent, r)
			parentSystem[system] = true
		}
	}
	if len(agentSystem) != 1 || len(parentSystem) != 1 || agentSystem[firstKey(parentSystem)] {
		t.Errorf("%d subagent system prompts, %d parent ones: want one each, different", len(agentSystem), len(parentSystem))
	}
	complete := 0
	for sid, c := range convs {
		if len(c.agents) == 0 {
			continue
		}
		if len(c.parent) == 0 {
			t.Fatalf("session %s: subagent requests without a parent", sid)
		}
		var want []string
		for j := range cfg.Subagents.N {
			want = append(want, cfg.agentID(stream[sid], j))
		}
		var got []string
		for a, reqs := range c.agents {
			if !agentIDRe.MatchString(a) {
				t.Errorf("agent id %q is not a + 16 hex", a)
			}
			if len(reqs) > 1+cfg.Subagents.Turns {
				t.Errorf("agent %s sent %d turns, want at most %d", a, len(reqs), 1+cfg.Subagents.Turns)
			}
			got = append(got, a)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("session %s: agent ids %v, want the seed's %v", sid, got, want)
		}
		// The subagents ran at once: their first turns overlap.
		var lastStart, firstDone time.Time
		for _, reqs := range c.agents {
			if reqs[0].At.After(lastStart) {
				lastStart = reqs[0].At
			}
			if d := reqs[0].Done; !d.IsZero() && (firstDone.IsZero() || d.Before(firstDone)) {
				firstDone = d
			}
		}
		if !firstDone.IsZero() && !lastStart.Before(firstDone) {
			t.Errorf("session %s: subagents' first turns did not overlap", sid)
		}
		finished := len(c.agents) == cfg.Subagents.N
		for _, reqs := range c.agents {
			finished = finished && len(reqs) == 1+cfg.Subagents.Turns && !reqs[len(reqs)-1].Done.IsZero()
		}
		if len(c.parent) < 2 {
			continue
		}
		if !finished {
			t.Fatalf("session %s: parent turn 2 sent before all its subagents finished", sid)
		}
		next := c.parent[1]
		msgs := gjson.GetBytes(next.Body, "messages").Array()
		lastUser := flatten([]byte(`{"messages":[` + msgs[len(msgs)-1].Raw + `]}`))
		for a, reqs := range c.agents {
			last := reqs[len(reqs)-1]
			if next.At.Before(last.Done) {
				t.Errorf("session %s: parent turn 2 at %v, before agent %s's last reply %v", sid, next.At, a, last.Done)
			}
			if !strings.Contains(lastUser, last.Reply) {
				t.Errorf("session %s: parent turn 2 lacks agent %s's final reply %q", sid, a, last.Reply)
			}
		}
		complete++
	}
	if complete == 0 {
		t.Fatalf("no session went past its subagents")
	}
	s := res.Stages[0]
	subTurns, parentsFinished := 0, 0
	for _, tr := range res.Turns {
		if tr.InStage {
			subTurns += btoi(tr.Subagent)
			parentsFinished += btoi(tr.LastTurn && !tr.Subagent)
		}
	}
	if s.SubagentTurns == 0 || s.SubagentTurns != subTurns || s.SessionsFinished != parentsFinished {
		t.Errorf("summary: %d subagent turns (records %d), %d sessions finished (parents %d)",
			s.SubagentTurns, subTurns, s.SessionsFinished, parentsFinished)
	}
	// The fake pins by session id: parents and subagents stay.
	if s.StayedPct == nil || *s.StayedPct != 100 || s.SubagentStayedPct == nil || *s.SubagentStayedPct != 100 {
		t.Errorf("stayed %v%%, subagents %v%%: want 100 and 100", s.StayedPct, s.SubagentStayedPct)
	}
	var buf bytes.Buffer
	if err := WriteTurnsCSV(&buf, res); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := slices.Index(rows[0], "agent_id")
	sub := slices.Index(rows[0], "subagent")
	seen := 0
	for _, row := range rows[1:] {
		if row[sub] == "true" {
			seen++
			if !agentIDRe.MatchString(row[col]) {
				t.Errorf("turns.csv: subagent row with agent_id %q", row[col])
			}
		}
	}
	if seen == 0 {
		t.Errorf("turns.csv marks no subagent turn")
	}
}

func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}

// A share below 1 spawns for some sessions only, the same ones for one
// seed; sessions without follow-ups never spawn.
func TestSubagentShare(t *testing.T) {
	c := DefaultConfig()
	c.Subagents = Subagents{Share: 0.5, N: 2, Turns: 1, SystemTokens: 10, TaskMin: 10, TaskMax: 20}
	var a, b []bool
	for k := range 40 {
		a = append(a, c.spawns([]any{4, k}))
		b = append(b, c.spawns([]any{4, k}))
	}
	if !slices.Equal(a, b) || !slices.Contains(a, true) || !slices.Contains(a, false) {
		t.Errorf("share 0.5 over 40 sessions: %v / %v", a, b)
	}
	_, srv := newFake(t, false)
	cfg := smallConfig(srv.URL, 2)
	cfg.Turns = 0
	cfg.Subagents = Subagents{Share: 1, N: 2, Turns: 1, SystemTokens: 10, TaskMin: 10, TaskMax: 20}
	for _, tr := range runBench(t, cfg, false).Turns {
		if tr.Subagent {
			t.Fatalf("a session without follow-ups spawned subagents")
		}
	}
}

// In a series, subagents carry over like their parents, and shrinking the
// stage retires parents with their subagents.
func TestSubagentsInSeries(t *testing.T) {
	f, srv := newFake(t, false)
	f.between = 2 * time.Millisecond
	cfg := carryConfig(srv.URL, 3, 1)
	cfg.Turns = 3
	cfg.Subagents = Subagents{Share: 1, N: 2, Turns: 2, SystemTokens: 50, TaskMin: 20, TaskMax: 80}
	res := runBench(t, cfg, false)
	sub := 0
	for _, tr := range res.Turns {
		if tr.Error != "" {
			t.Fatalf("turn failed: %s", tr.Error)
		}
		sub += btoi(tr.Subagent)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if sub == 0 || f.broken != 0 {
		t.Errorf("%d subagent turns, %d broken conversations", sub, f.broken)
	}
}

package place

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestSessionTableExpiresIdleSessions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tab := NewTable(time.Minute, 0)
	tab.Insert("a", 0, t0)
	tab.Insert("b", 1, t0.Add(30*time.Second))
	if tab.Get("a", t0.Add(59*time.Second)) == nil {
		t.Fatal("a expired before its TTL")
	}
	// a was touched at 59 s; b was last seen at 30 s.
	if tab.Get("b", t0.Add(91*time.Second)) != nil {
		t.Error("b outlived its TTL")
	}
	if tab.Get("a", t0.Add(118*time.Second)) == nil {
		t.Error("a expired although touched")
	}
	if tab.active[1] != 0 || tab.active[0] != 1 || tab.Len() != 1 {
		t.Errorf("active %v len %d", tab.active, tab.Len())
	}
}

func TestSessionTableEvictsLeastRecentlyUsed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tab := NewTable(0, 3)
	for i, k := range []string{"a", "b", "c"} {
		tab.Insert(k, i, t0)
	}
	tab.Get("a", t0) // a is now the most recent
	tab.Insert("d", 0, t0)
	if tab.Peek("b") != nil || tab.Peek("a") == nil || tab.Len() != 3 {
		t.Errorf("after eviction: b=%v a=%v len=%d", tab.Peek("b"), tab.Peek("a"), tab.Len())
	}
	if tab.active[1] != 0 || tab.seen != 4 {
		t.Errorf("active %v seen %d", tab.active, tab.seen)
	}
}

func TestSessionTableContextSums(t *testing.T) {
	tab := NewTable(time.Minute, 0)
	t0 := time.Unix(1000, 0)
	a, b := tab.Insert("a", 0, t0), tab.Insert("b", 0, t0)
	tab.SetContext(a, 1000)
	tab.SetContext(b, 3000)
	tab.SetContext(a, 2000)
	if tab.ctxSum != 5000 || tab.ctxN != 2 {
		t.Errorf("sum %d n %d, want 5000 2", tab.ctxSum, tab.ctxN)
	}
	tab.Rehome(b, 1)
	tab.Expire(t0.Add(2 * time.Minute))
	if tab.ctxSum != 0 || tab.ctxN != 0 || tab.active[0] != 0 || tab.active[1] != 0 {
		t.Errorf("after expiry: sum %d n %d active %v", tab.ctxSum, tab.ctxN, tab.active)
	}
}

// BenchmarkSessionMemory reports the heap bytes per session in a table of
// 100k sessions with UUID keys.
func BenchmarkSessionMemory(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%08x-3cb8-4c5e-8d21-%012x", i, i)
	}
	now := time.Unix(1_000_000, 0)
	var perSession float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tab := NewTable(time.Hour, 0)
		for i, k := range keys {
			s := tab.Insert(k, i%8, now)
			tab.SetContext(s, 1000)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perSession = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(tab)
	}
	b.ReportMetric(perSession, "bytes/session")
}

func TestSessionTableFedAMillionIDsStaysWithinItsBound(t *testing.T) {
	const ids, bound = 1_000_000, 10_000
	tab := NewTable(time.Hour, bound)
	now := time.Unix(1_800_000_000, 0)
	heap0 := simproc.HeapAfterGC()
	for i := range ids {
		key := fmt.Sprintf("million-%07d", i)
		if tab.Get(key, now) != nil {
			t.Fatalf("id %d: a new id found in the table", i)
		}
		tab.Insert(key, i%4, now)
		if tab.Len() > bound {
			t.Fatalf("after %d ids the table holds %d entries, bound %d", i+1, tab.Len(), bound)
		}
		if i%1000 == 0 {
			now = now.Add(time.Millisecond)
		}
	}
	heap1 := simproc.HeapAfterGC()
	active := 0
	for _, n := range tab.active {
		active += n
	}
	t.Logf("%d distinct ids -> %d sessions kept (bound %d), heap after GC %.1f -> %.1f MiB",
		ids, tab.Len(), bound, float64(heap0)/(1<<20), float64(heap1)/(1<<20))
	if tab.Len() != bound || active != bound || tab.seen != ids {
		t.Errorf("table: %d entries, %d active by replica, %d seen; want %d, %d, %d", tab.Len(), active, tab.seen, bound, bound, ids)
	}
	if tab.Get("million-0999999", now) == nil || tab.Get("million-0000000", now) != nil {
		t.Error("eviction is not least-recently-used: the newest id is gone or the oldest is kept")
	}
	if heap1 > heap0+32<<20 {
		t.Errorf("heap grew by %d MiB for a table bounded at %d", (heap1-heap0)>>20, bound)
	}
	runtime.KeepAlive(tab)
}

// TestSessionTableActiveWindow: a session counts as active (per replica and
// in the context sums the overcommit warning reads) only within the active
// window of its last request; the window follows the gaps seen between a
// session's requests.
func TestSessionTableActiveWindow(t *testing.T) {
	tb := NewTable(time.Hour, 0)
	t0 := time.Unix(1000, 0)
	if tb.ActiveWindow() != DefaultActiveWindow {
		t.Fatalf("window before any gap: %v", tb.ActiveWindow())
	}
	// 40 sessions, each with two requests 60 s apart: the window becomes 2 x 60 s.
	now := t0
	for i := range 40 {
		k := fmt.Sprint("s", i)
		tb.SetContext(tb.Insert(k, i%2, now), 10_000)
		tb.Get(k, now.Add(60*time.Second))
		now = now.Add(time.Second)
	}
	if w := tb.ActiveWindow(); w != 120*time.Second {
		t.Fatalf("window after 60 s gaps: %v, want 2m0s", w)
	}
	now = now.Add(60 * time.Second) // the last request of s39 was at now-1s... all within 2 min
	tb.Expire(now)
	if tb.ActiveTotal() != 40 || tb.Active(0)+tb.Active(1) != 40 {
		t.Fatalf("active %d (%d+%d), want 40", tb.ActiveTotal(), tb.Active(0), tb.Active(1))
	}
	// Ten minutes later only the session that came back is active.
	later := now.Add(10 * time.Minute)
	tb.Get("s7", later)
	tb.Expire(later)
	if tb.ActiveTotal() != 1 || tb.Active(1) != 1 || tb.Active(0) != 0 || tb.Len() != 40 {
		t.Errorf("after 10 idle minutes: active %d (%d/%d), len %d; want 1 active (on 1), 40 kept",
			tb.ActiveTotal(), tb.Active(0), tb.Active(1), tb.Len())
	}
	if sum, n := tb.Contexts(); n != 1 || sum != 10_000 {
		t.Errorf("active contexts %d over %d sessions, want 10000 over 1", sum, n)
	}
	if tb.Homed(0)+tb.Homed(1) != 40 {
		t.Errorf("homed %d+%d, want all 40", tb.Homed(0), tb.Homed(1))
	}
}

// TestSessionTableFixedWindow: a fixed window does not follow the gaps,
// and a long one keeps every session placed active.
func TestSessionTableFixedWindow(t *testing.T) {
	tb := NewTable(0, 0)
	tb.FixWindow(24 * time.Hour)
	now := time.Unix(1000, 0)
	for i := range 40 {
		k := fmt.Sprint("s", i)
		tb.Insert(k, i%2, now)
		tb.Get(k, now.Add(60*time.Second))
		now = now.Add(time.Second)
	}
	tb.Expire(now.Add(time.Hour))
	if w := tb.ActiveWindow(); w != 24*time.Hour || tb.ActiveTotal() != 40 || tb.Active(0) != 20 {
		t.Errorf("window %v, active %d (%d on 0); want 24h, 40, 20", w, tb.ActiveTotal(), tb.Active(0))
	}
}

// TestSessionTableActiveCountsMatchARecount drives the table with random
// inserts, requests, rehomes, unhomes, context updates and time steps, and
// after each compares its O(1) active counts with a recount from scratch.
func TestSessionTableActiveCountsMatchARecount(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tb := NewTable(20*time.Minute, 300)
	now := time.Unix(0, 0)
	for step := range 20_000 {
		now = now.Add(time.Duration(rng.IntN(int(20 * time.Second))))
		k := fmt.Sprint("k", rng.IntN(500))
		switch op := rng.IntN(10); {
		case op < 5:
			if s := tb.Get(k, now); s == nil {
				s = tb.Insert(k, rng.IntN(3), now)
				if rng.IntN(3) == 0 {
					tb.MarkSubagent(s)
				}
			}
		case op < 7:
			if s := tb.Peek(k); s != nil {
				tb.Rehome(s, rng.IntN(3))
			}
		case op < 8:
			if s := tb.Peek(k); s != nil {
				tb.SetContext(s, uint32(rng.IntN(5))*1000)
			}
		case op < 9 && step%50 == 0:
			tb.Unhome(rng.IntN(3))
		default:
			tb.Expire(now)
		}
		tb.Expire(now)
		cutoff := now.Add(-tb.ActiveWindow())
		want, wantSub := map[int]int{}, map[int]int{}
		total, n, subTotal := 0, 0, 0
		var sum uint64
		for s := range tb.Oldest() {
			if !s.LastSeen().Before(cutoff) {
				total++
				if s.Home() >= 0 {
					want[s.Home()]++
				}
				if s.Subagent() {
					subTotal++
					if s.Home() >= 0 {
						wantSub[s.Home()]++
					}
				}
				if s.Context() > 0 {
					sum += uint64(s.Context())
					n++
				}
			}
		}
		gotSum, gotN := tb.Contexts()
		if tb.ActiveTotal() != total || gotSum != sum || gotN != n {
			t.Fatalf("step %d: active %d contexts %d/%d, recount %d %d/%d", step, tb.ActiveTotal(), gotSum, gotN, total, sum, n)
		}
		if tb.SubagentsActiveTotal() != subTotal {
			t.Fatalf("step %d: active subagents %d, recount %d", step, tb.SubagentsActiveTotal(), subTotal)
		}
		for r := range 3 {
			if tb.Active(r) != want[r] || tb.SubagentsActive(r) != wantSub[r] {
				t.Fatalf("step %d: Active(%d) = %d (subagents %d), recount %d (%d)", step, r, tb.Active(r),
					tb.SubagentsActive(r), want[r], wantSub[r])
			}
		}
	}
}

// TestActiveWindowFollowsTheEnginesClock: on engines ten times faster than
// real time (a simulator's --sim-time-scale 10) agents come back ten times
// sooner, so the active window's default and floor shrink with them: a
// session idle for a wall minute is no longer counted as active.
func TestActiveWindowFollowsTheEnginesClock(t *testing.T) {
	tab := NewTable(time.Hour, 0)
	if w := tab.ActiveWindow(); w != DefaultActiveWindow {
		t.Fatalf("window before any scale: %v, want %v", w, DefaultActiveWindow)
	}
	tab.SetTimeScale(10)
	if w := tab.ActiveWindow(); w != DefaultActiveWindow/10 {
		t.Errorf("window at scale 10: %v, want %v", w, DefaultActiveWindow/10)
	}
	tab.SetTimeScale(1)
	if w := tab.ActiveWindow(); w != DefaultActiveWindow {
		t.Errorf("window back at scale 1: %v, want %v", w, DefaultActiveWindow)
	}
}

// TestSessionTableReadAtMatchesExpire drives tables with random requests,
// rehomes, context updates and time steps without expiring between them,
// and at each step compares the counts ReadAt reads as of now (a read: the
// table keeps its entries) with the table's own counts once Expire(now) has
// run. One table's window follows the gaps within its TTL; the other's is
// fixed and longer than its TTL (the replay's).
func TestSessionTableReadAtMatchesExpire(t *testing.T) {
	fixed := NewTable(3*time.Minute, 0)
	fixed.FixWindow(10 * time.Minute)
	for name, tb := range map[string]*Table{"gaps": NewTable(20*time.Minute, 300), "fixed": fixed} {
		rng := rand.New(rand.NewPCG(3, 9))
		now := time.Unix(0, 0)
		for step := range 5_000 {
			now = now.Add(time.Duration(rng.IntN(int(30 * time.Second))))
			k := fmt.Sprint("k", rng.IntN(300))
			switch op := rng.IntN(10); {
			case op < 5:
				if s := tb.Peek(k); s == nil {
					s = tb.Insert(k, rng.IntN(3), now)
					if rng.IntN(3) == 0 {
						tb.MarkSubagent(s)
					}
				}
			case op < 7:
				if s := tb.Peek(k); s != nil {
					tb.Rehome(s, rng.IntN(4)-1)
				}
			case op < 9:
				if s := tb.Peek(k); s != nil {
					tb.SetContext(s, uint32(rng.IntN(5))*1000)
				}
			default:
				tb.Get(k, now) // expires, and moves k to the front
			}
			if step%7 != 0 {
				continue // let entries age past the TTL and the window unexpired
			}
			lenBefore := tb.Len()
			r := tb.ReadAt(now)
			if tb.Len() != lenBefore {
				t.Fatalf("%s step %d: ReadAt changed the table's length %d -> %d", name, step, lenBefore, tb.Len())
			}
			got := []int{r.Len, r.ActiveTotal, r.SubagentsActiveTotal, int(r.ContextSum), r.ContextN}
			perRank := func(active func(int) int, sub func(int) int) (out []int) {
				for rank := -1; rank < 3; rank++ {
					out = append(out, active(rank), sub(rank))
				}
				return out
			}
			gotRanks := perRank(r.Active, r.SubagentsActive)
			tb.Expire(now)
			sum, n := tb.Contexts()
			want := []int{tb.Len(), tb.ActiveTotal(), tb.SubagentsActiveTotal(), int(sum), n}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s step %d: ReadAt's totals (len, active, subagents, context sum, n) (-expired +read):\n%s", name, step, diff)
			}
			if diff := cmp.Diff(perRank(tb.Active, tb.SubagentsActive), gotRanks); diff != "" {
				t.Fatalf("%s step %d: ReadAt's per-rank active, subagents (-expired +read):\n%s", name, step, diff)
			}
		}
	}
}

package kvevents

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Real sockets on loopback and in a private directory. Waits are bounded by a generous
// deadline that fails the test; nothing asserts how long anything took.

const patience = 30 * time.Second

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func ipcDir(t *testing.T) string {
	t.Helper()
	// A short path: unix socket names are limited to ~108 bytes.
	dir, err := os.MkdirTemp("", "kvev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// subscriber runs Subscribe and queues what it delivers.
type subscriber struct {
	t       *testing.T
	updates chan Update
	cancel  context.CancelFunc
	done    chan error
}

func subscribe(t *testing.T, cfg SubscriberConfig) *subscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscriber{t: t, updates: make(chan Update, 10000), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- Subscribe(ctx, cfg, func(u Update) { s.updates <- u }) }()
	t.Cleanup(s.stop)
	return s
}

func (s *subscriber) stop() {
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Errorf("Subscribe returned %v", err)
		}
		s.done <- nil
	case <-time.After(patience):
		s.t.Error("Subscribe did not return after its context ended")
	}
}

// next returns the next update, or nil when none comes within wait.
func (s *subscriber) next(wait time.Duration) *Update {
	select {
	case u := <-s.updates:
		return &u
	case <-time.After(wait):
		return nil
	}
}

func (s *subscriber) must() Update {
	s.t.Helper()
	u := s.next(patience)
	if u == nil {
		s.t.Fatal("no update")
	}
	return *u
}

func (s *subscriber) waitCaughtUp() []Update {
	s.t.Helper()
	var before []Update
	for {
		u := s.must()
		if u.CaughtUp {
			return before
		}
		before = append(before, u)
	}
}

// marker is a batch's events naming i, so a test can tell batches apart.
func marker(i int) []Event {
	return []Event{{Kind: KindStored, Hashes: []uint64{uint64(i)}, TokenIDs: []uint32{1, 2}, BlockSize: 2, Medium: MediumGPU, SessionID: fmt.Sprint("s", i)}}
}

func markerOf(u Update) int {
	if u.Batch == nil || len(u.Batch.Events) != 1 || len(u.Batch.Events[0].Hashes) != 1 {
		return -1
	}
	return int(u.Batch.Events[0].Hashes[0])
}

// publisher counts what it publishes, so a test knows the sequence numbers given.
type publisher struct {
	*Publisher
	n int
}

func newPublisher(t *testing.T, cfg PublisherConfig) *publisher {
	t.Helper()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &publisher{Publisher: p}
}

func (p *publisher) publish() int {
	p.Publish(marker(p.n))
	p.n++
	return p.n - 1
}

// settle publishes until the subscriber sees a live batch (the subscription has reached
// the publisher), then drains everything up to the last one published. It returns the
// updates seen.
func settle(t *testing.T, p *publisher, s *subscriber) []Update {
	t.Helper()
	var seen []Update
	deadline := time.Now().Add(patience)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the subscriber never received a live batch")
		}
		last := p.publish()
		for u := s.next(100 * time.Millisecond); u != nil; u = s.next(100 * time.Millisecond) {
			seen = append(seen, *u)
			if markerOf(*u) == last {
				return seen
			}
		}
	}
}

// batchesOnly checks updates are batches with consecutive sequences 0.. and markers equal
// to their sequence numbers.
func batchesOnly(t *testing.T, from int, us []Update) {
	t.Helper()
	for i, u := range us {
		if u.Batch == nil {
			t.Fatalf("update %d is %+v, want batch %d", i, u, from+i)
		}
		if int(u.Batch.Seq) != from+i || markerOf(u) != from+i {
			t.Fatalf("update %d: seq %d marker %d, want %d", i, u.Batch.Seq, markerOf(u), from+i)
		}
	}
}

func (s *subscriber) batches(n int) []Update {
	s.t.Helper()
	out := make([]Update, 0, n)
	for len(out) < n {
		out = append(out, s.must())
	}
	return out
}

type link struct{ pub, replay, sub, subReplay string }

func ipcLink(t *testing.T) (PublisherConfig, SubscriberConfig) {
	dir := ipcDir(t)
	pub, rep := "ipc://"+filepath.Join(dir, "ev"), "ipc://"+filepath.Join(dir, "replay")
	return PublisherConfig{Endpoint: pub, Replay: rep, Topic: "kv@test"},
		SubscriberConfig{Endpoint: pub, Replay: rep, Topic: "kv@test", ReplayTimeout: 2 * time.Second}
}

// tcpBindLink: the subscriber binds loopback and the publisher connects out to it (a plain
// tcp://host:port endpoint, as vLLM treats it); replay bound on loopback.
func tcpBindLink(t *testing.T) (PublisherConfig, SubscriberConfig) {
	pub := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	rep := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	return PublisherConfig{Endpoint: pub, Replay: rep},
		SubscriberConfig{Endpoint: pub, Bind: true, Replay: rep, ReplayTimeout: 2 * time.Second}
}

func TestBatchesArriveInOrder(t *testing.T) {
	for name, link := range map[string]func(*testing.T) (PublisherConfig, SubscriberConfig){
		"ipc, the publisher binds":                       ipcLink,
		"tcp loopback, the subscriber binds (bind mode)": tcpBindLink,
	} {
		t.Run(name, func(t *testing.T) {
			pc, sc := link(t)
			pc.Rank = 0
			s := subscribe(t, sc)
			if before := s.waitCaughtUp(); len(before) != 0 {
				t.Fatalf("before CaughtUp: %+v", before)
			}
			p := newPublisher(t, pc)
			batchesOnly(t, 0, settle(t, p, s))
			from := p.n
			for range 200 {
				p.publish()
			}
			got := s.batches(200)
			batchesOnly(t, from, got)
			want := Event{Kind: KindStored, Hashes: []uint64{uint64(from)}, Tokens: 2, BlockSize: 2, Medium: "GPU", SessionID: fmt.Sprint("s", from)}
			if diff := cmp.Diff(want, got[0].Batch.Events[0]); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
			if !got[0].Batch.HasRank || got[0].Batch.Rank != 0 || got[0].Batch.Time == 0 {
				t.Errorf("batch header: %+v", got[0].Batch)
			}
		})
	}
}

func TestLateSubscriberCatchesUpThroughReplay(t *testing.T) {
	// Rank 3 offsets both ports by 3, as vLLM does: the subscriber names the offset ones.
	pub, rep := freePort(t), freePort(t)
	pc := PublisherConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pub-3), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", rep-3), Rank: 3}
	sc := SubscriberConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", pub), Bind: true, Replay: fmt.Sprintf("tcp://127.0.0.1:%d", rep)}
	p := newPublisher(t, pc)
	for range 20 {
		p.publish()
	}
	waitBuffered(t, p.Publisher, 20)
	s := subscribe(t, sc)
	before := s.waitCaughtUp()
	batchesOnly(t, 0, before)
	if len(before) != 20 {
		t.Fatalf("replayed %d batches before CaughtUp, want 20", len(before))
	}
	if b := before[0].Batch; !b.HasRank || b.Rank != 3 {
		t.Errorf("rank %d (has %v), want 3", b.Rank, b.HasRank)
	}
	batchesOnly(t, 20, settle(t, p, s))
}

// waitBuffered waits until the publisher's goroutine has sent n batches.
func waitBuffered(t *testing.T, p *Publisher, n int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for len(p.buffered(0)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("publisher sent %d of %d batches", len(p.buffered(0)), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dropper loses the live copies of the sequences it is told, set before publishing.
type dropper struct {
	mu   sync.Mutex
	lose map[uint64]bool
}

func (d *dropper) drop(seq uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lose[seq]
}

func (d *dropper) set(from, to int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lose = map[uint64]bool{}
	for i := from; i < to; i++ {
		d.lose[uint64(i)] = true
	}
}

func TestGapHealedByReplay(t *testing.T) {
	pc, sc := tcpBindLink(t)
	s := subscribe(t, sc)
	s.waitCaughtUp()
	p := newPublisher(t, pc)
	d := &dropper{}
	p.dropLive = d.drop
	settle(t, p, s)
	from := p.n
	d.set(from+2, from+5) // three messages lost on the way
	for range 8 {
		p.publish()
	}
	batchesOnly(t, from, s.batches(8))
}

func TestGapReplayCannotHealIsReported(t *testing.T) {
	pc, sc := ipcLink(t)
	pc.BufferSteps = 2
	s := subscribe(t, sc)
	s.waitCaughtUp()
	p := newPublisher(t, pc)
	d := &dropper{}
	p.dropLive = d.drop
	for _, u := range settle(t, p, s) {
		if u.Batch == nil && u.Gap == nil {
			t.Fatalf("while settling: %+v", u)
		}
	}
	from := p.n
	d.set(from, from+5) // five lost; replay keeps two
	for range 6 {
		p.publish()
	}
	// When the subscriber sees from+5 live, the buffer holds from+4 and from+5.
	want := []Update{{Gap: &Gap{From: uint64(from), To: uint64(from + 4)}}}
	got := []Update{s.must()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	batchesOnly(t, from+4, s.batches(2))
}

func TestPublisherRestartIsReported(t *testing.T) {
	pc, sc := ipcLink(t)
	s := subscribe(t, sc)
	s.waitCaughtUp()
	a := newPublisher(t, pc)
	settle(t, a, s)
	for range 10 {
		a.publish()
	}
	batchesOnly(t, a.n-10, s.batches(10))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := newPublisher(t, pc)
	// The new process's batches 0.. follow a Restarted, whatever the subscriber missed
	// while it reconnected (healed by replay).
	var got []Update
	deadline := time.Now().Add(patience)
	for !containsRestart(got) || markerOf(got[len(got)-1]) != b.n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("no restart seen: %+v", got)
		}
		last := b.publish()
		for u := s.next(100 * time.Millisecond); u != nil; u = s.next(100 * time.Millisecond) {
			got = append(got, *u)
			if markerOf(*u) == last {
				break
			}
		}
	}
	if !got[0].Restarted {
		t.Fatalf("first update after the restart is %+v, want Restarted", got[0])
	}
	batchesOnly(t, 0, got[1:])
}

func containsRestart(us []Update) bool {
	for _, u := range us {
		if u.Restarted {
			return true
		}
	}
	return false
}

func TestReplayAbsentDeliversCaughtUpAndGaps(t *testing.T) {
	pc, sc := ipcLink(t)
	sc.Replay = ""
	p := newPublisher(t, pc)
	for range 5 {
		p.publish()
	}
	waitBuffered(t, p.Publisher, 5)
	s := subscribe(t, sc)
	if before := s.waitCaughtUp(); len(before) != 0 {
		t.Fatalf("before CaughtUp: %+v", before)
	}
	got := settle(t, p, s)
	if got[0].Gap == nil || got[0].Gap.From != 0 || got[0].Gap.To < 5 {
		t.Fatalf("first update %+v, want a gap from 0 past the 5 missed", got[0])
	}
}

// BenchmarkPublish is what a simulator step pays to publish: queueing one batch (encoding
// and sending happen on the publisher's goroutine).
func BenchmarkPublish(b *testing.B) {
	dir, err := os.MkdirTemp("", "kvev")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p, err := NewPublisher(PublisherConfig{Endpoint: "ipc://" + filepath.Join(dir, "ev"), BufferSteps: 100})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	evs := []Event{{Kind: KindStored, Hashes: []uint64{1}, TokenIDs: make([]uint32, 16), BlockSize: 16, Medium: MediumGPU, SessionID: "s"}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Publish(evs)
	}
}

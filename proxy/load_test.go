package proxy

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

// Load: 1,000 concurrent streams through the proxy to four simulator
// processes, then no goroutine or heap growth; and a session table fed a
// million distinct ids stays within its bound.

// raiseFileLimit lifts the soft open-file limit to at least n (bounded by
// the hard limit) for this process and the simulators it starts.
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	old := lim.Cur
	lim.Cur = min(n, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < n {
		t.Skipf("open-file limit %d (hard %d) is below the %d this test needs", old, lim.Max, n)
	}
	t.Cleanup(func() { lim.Cur = old; _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
}

// loadRound is the outcome of one round of concurrent streams.
type loadRound struct {
	ok, failed  int64
	firstError  string
	peakFlight  int
	elapsed     time.Duration
	events      int64
	tokensAsked int
}

// streamRound sends n streaming chat requests at once (each with its own
// session) and reads every stream to its end. Each stream waits, once its
// response headers are in, until all n have theirs: at that moment every
// request is inside the proxy at once, and the proxy's in-flight count is
// read then (peakFlight).
func streamRound(t *testing.T, p *Proxy, client *http.Client, url string, n, maxTokens int, tag string) loadRound {
	t.Helper()
	var res loadRound
	var errMu sync.Mutex
	start, hold := make(chan struct{}), make(chan struct{})
	var wg, headed sync.WaitGroup
	headed.Add(n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			events, err := oneStream(client, url, fmt.Sprintf("%s-%d", tag, i), maxTokens, headed.Done, hold)
			atomic.AddInt64(&res.events, int64(events))
			if err == nil {
				atomic.AddInt64(&res.ok, 1)
				return
			}
			atomic.AddInt64(&res.failed, 1)
			errMu.Lock()
			if res.firstError == "" {
				res.firstError = err.Error()
			}
			errMu.Unlock()
		}()
	}
	t0 := time.Now()
	close(start)
	headed.Wait()
	res.peakFlight = inFlight(p)
	close(hold)
	wg.Wait()
	res.elapsed = time.Since(t0)
	res.tokensAsked = maxTokens
	return res
}

func inFlight(p *Proxy) int {
	n := 0
	for _, r := range coreOf(p).Replicas() {
		n += int(r.InFlight())
	}
	return n
}

// oneStream posts one streaming request and reads it to the end; it
// returns the number of data events. headed is called exactly once, when
// the response headers are in or the request failed before them; the body
// is read only after hold is closed.
func oneStream(client *http.Client, url, session string, maxTokens int, headed func(), hold <-chan struct{}) (int, error) {
	var once sync.Once
	defer once.Do(headed)
	body := fmt.Sprintf(`{"model":"test-model","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"load %s"}]}`, maxTokens, session)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	once.Do(headed)
	<-hold
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s: reading: %w", session, err)
	}
	s := string(b)
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(s, "data: [DONE]\n\n") || strings.Contains(s, `"error"`) {
		return 0, fmt.Errorf("%s: status %d: %.200s", session, resp.StatusCode, s)
	}
	return strings.Count(s, "data: "), nil
}

func TestLoadThousandConcurrentStreamsThenNoGrowth(t *testing.T) {
	const n, replicas = 1000, 4
	raiseFileLimit(t, 4*n+512)
	// At a third of real time a 40-token stream lasts ~5 s at the engine,
	// longer than the spread of the 1000 requests' arrival on a loaded CI
	// machine: the first streams are still open at the proxy when the last
	// get their headers (the proxy finishes a stream once it has written it
	// to the client's socket, read or not).
	sim := []string{"--max-num-seqs", "256", "--sim-time-scale", "0.3"}
	perSim := make([][]string, replicas)
	for i := range perSim {
		perSim[i] = sim
	}
	_, bs := simSet(t, perSim...)
	for i := range bs {
		bs[i].MaxNumSeqs = 256
	}
	p, front := testProxyBackends(t, testConfig{}, bs)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}}
	quiet := func() (heap uint64, gor int) {
		settled(t, p)
		client.CloseIdleConnections()
		p.CloseIdleConnections()
		return simproc.HeapAfterGC(), runtime.NumGoroutine()
	}
	warm := streamRound(t, p, client, front.URL, n, 2, "warm")
	if warm.failed > 0 {
		t.Fatalf("warm-up: %d of %d failed, first: %s", warm.failed, n, warm.firstError)
	}
	heap0, gor0 := quiet()
	res := streamRound(t, p, client, front.URL, n, 40, "load")
	if res.failed > 0 || res.ok != n {
		t.Fatalf("%d of %d streams failed, first: %s", res.failed, n, res.firstError)
	}
	if res.peakFlight != n {
		t.Errorf("in flight with all %d streams open: %d; the proxy did not hold them concurrently", n, res.peakFlight)
	}
	heap1, _ := quiet()
	var gor1 int
	simproc.Poll(t, "goroutines back to the level before the round", func() bool {
		gor1 = runtime.NumGoroutine()
		return gor1 <= gor0
	})
	t.Logf("%d concurrent streams (peak in flight %d) x %d tokens: %d ok, %d failed, %d events in %v; "+
		"heap after GC %.1f -> %.1f MiB, goroutines %d -> %d",
		n, res.peakFlight, res.tokensAsked, res.ok, res.failed, res.events, res.elapsed.Round(time.Millisecond),
		float64(heap0)/(1<<20), float64(heap1)/(1<<20), gor0, gor1)
	if heap1 > heap0+4<<20 {
		t.Errorf("heap grew from %d to %d bytes over %d streams", heap0, heap1, n)
	}
	st := coreOf(p).Status()
	for _, r := range st.Replicas {
		if r.Errors != 0 || !r.Up {
			t.Errorf("replica %d: %d errors, up %v", r.Rank, r.Errors, r.Up)
		}
	}
}

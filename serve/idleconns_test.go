package serve

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

// idleConns is how many keep-alive client connections the test holds: a
// farm of coding agents, each with its connection pool, left idle between
// turns.
const idleConns = 10_000

// getOn sends GET path on c (HTTP/1.1, kept alive) and reads the answer.
func getOn(c net.Conn, br *bufio.Reader, path string) (int, error) {
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: warden\r\n\r\n", path); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = bufio.NewReader(resp.Body).WriteTo(discard{})
	return resp.StatusCode, err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// The warden holds 10,000 idle keep-alive client connections, each still
// usable, with a bounded heap, and lets go of them when they close.
func TestServeHoldsTenThousandIdleKeepAliveConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 loopback connections")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max < idleConns+1000 {
		t.Skipf("the hard file-descriptor limit (%d) is below %d", lim.Max, idleConns+1000)
	}
	w := startServe(t, "--dp", "1")
	metrics := func() map[string]float64 {
		m, err := simproc.ScrapeMetrics(w.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := metrics()
	host := strings.TrimPrefix(w.url, "http://")
	conns := make([]net.Conn, 0, idleConns)
	readers := make([]*bufio.Reader, 0, idleConns)
	defer func() {
		for _, c := range conns {
			_ = c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT left on the shared machine
			c.Close()
		}
	}()
	for i := range idleConns {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		readers = append(readers, bufio.NewReaderSize(c, 512))
		if code, err := getOn(c, readers[i], "/health"); err != nil || code != 200 {
			t.Fatalf("connection %d: GET /health: %d %v", i, code, err)
		}
	}
	held := metrics()
	if fds := held["process_open_fds"] - before["process_open_fds"]; fds < idleConns {
		t.Fatalf("the warden holds %.0f more descriptors, want %d idle connections", fds, idleConns)
	}
	for i := 0; i < idleConns; i += 97 { // still open and usable
		if code, err := getOn(conns[i], readers[i], "/health"); err != nil || code != 200 {
			t.Fatalf("idle connection %d: GET /health: %d %v", i, code, err)
		}
	}
	perConn := func(name string) float64 { return (held[name] - before[name]) / idleConns }
	heap, stack, rss := perConn("go_memstats_heap_inuse_bytes"), perConn("go_memstats_stack_inuse_bytes"),
		perConn("process_resident_memory_bytes")
	if heap+stack > 64<<10 {
		t.Errorf("%.1f KiB of heap and %.1f KiB of stack per idle connection, want under 64 KiB together", heap/1024, stack/1024)
	}
	t.Logf("%d idle connections: per connection heap %.1f KiB, stacks %.1f KiB, RSS %.1f KiB; goroutines %.0f -> %.0f; open fds %.0f -> %.0f",
		idleConns, heap/1024, stack/1024, rss/1024, before["go_goroutines"], held["go_goroutines"],
		before["process_open_fds"], held["process_open_fds"])
	for _, c := range conns {
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	conns = nil
	simproc.Poll(t, "the warden letting go of the closed connections", func() bool {
		m := metrics()
		return m["go_goroutines"] < before["go_goroutines"]+50 && m["process_open_fds"] < before["process_open_fds"]+50
	})
	after := metrics()
	t.Logf("after closing: goroutines %.0f, open fds %.0f (the heap is returned at the next collection)",
		after["go_goroutines"], after["process_open_fds"])
}

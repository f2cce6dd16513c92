package panel

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/lmwarden/warden/router/schema"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/internal/simproc"
)

// show runs ShowStatus as `warden status` does with its defaults (a 2s
// interval, a 5s timeout) where o leaves them, and returns its output.
func show(ctx context.Context, o StatusOptions) (string, error) {
	var out simproc.SyncBuffer
	if o.Interval == 0 {
		o.Interval = 2 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	o.Out = &out
	err := ShowStatus(ctx, o)
	return out.String(), err
}

func statusServer(t *testing.T, s schema.Status) *httptest.Server {
	srv := httptest.NewServer(JSONHandler(func() schema.Status { return s }))
	t.Cleanup(srv.Close)
	return srv
}

// exitCode is the status of an exit.Error, or -1.
func exitCode(err error) int {
	if e, ok := exit.As(err); ok {
		return e.Code
	}
	return -1
}

func TestShowStatusPrintsTable(t *testing.T) {
	s := sampleStatus(3)
	srv := statusServer(t, s)
	out, err := show(context.Background(), StatusOptions{URL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	formatStatusTable(&want, s)
	if diff := cmp.Diff(want.String(), out); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"1", "1", "8102", "up", "4", "1131", "18", "2", "4", "1", "47.3%", "42.0k", "80.7%", "3", "1"},
		rowFields(out, "1")); diff != "" {
		t.Errorf("replica 1 (-want +got):\n%s", diff)
	}
}

func TestShowStatusJSON(t *testing.T) {
	s := sampleStatus(2)
	srv := statusServer(t, s)
	// host:port works too (WARDEN_URL: command's TestStatusURLFromTheEnvironment)
	out, err := show(context.Background(), StatusOptions{URL: strings.TrimPrefix(srv.URL, "http://"), JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	var got schema.Status
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestShowStatusNoWarden(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = show(context.Background(), StatusOptions{URL: "http://" + addr})
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "no warden at http://"+addr+": ") ||
		!strings.Contains(err.Error(), "is `warden serve` running?") {
		t.Errorf("got %v (code %d)", err, exitCode(err))
	}
}

func TestShowStatusNotAWarden(t *testing.T) {
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }))
	defer garbage.Close()
	for srv, want := range map[*httptest.Server]string{
		notFound: "/warden/status answered 404 Not Found: is this a warden",
		garbage:  "/warden/status did not answer a warden status",
	} {
		_, err := show(context.Background(), StatusOptions{URL: srv.URL})
		if exitCode(err) != 1 || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

func TestShowStatusBadOptions(t *testing.T) {
	for _, o := range []StatusOptions{{URL: "ftp://x"}, {URL: ""}, {URL: "http://h:1", Interval: time.Millisecond}} {
		if _, err := show(context.Background(), o); exitCode(err) != 2 {
			t.Errorf("%+v: got %v, want exit code 2", o, err)
		}
	}
}

// TestShowStatusWatch runs --watch against a server that cancels the
// run at its third request; the frames before it are printed one after
// another (the output is not a terminal).
func TestShowStatusWatch(t *testing.T) {
	s := sampleStatus(2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 3 {
			cancel()
		}
		JSONHandler(func() schema.Status { return s }).ServeHTTP(w, r)
	}))
	defer srv.Close()
	out, err := show(ctx, StatusOptions{URL: srv.URL, Watch: true, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out, srv.URL+"  every 100ms  "); got < 2 {
		t.Errorf("%d frames, want at least 2:\n%s", got, out)
	}
	if got := strings.Count(out, "counters since "); got < 2 {
		t.Errorf("%d tables, want at least 2:\n%s", got, out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("escape codes written to a non-terminal")
	}
}

// cancelAfter cancels a context after its nth write.
type cancelAfter struct {
	simproc.SyncBuffer
	n      atomic.Int64
	after  int64
	cancel func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if c.n.Add(1) == c.after {
		c.cancel()
	}
	return c.SyncBuffer.Write(p)
}

func TestWatchSurvivesAMissingWarden(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &cancelAfter{after: 2, cancel: cancel}
	v := viewer{base: "http://127.0.0.1:1", client: http.DefaultClient, out: out}
	if err := v.watch(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "no warden at http://127.0.0.1:1"); got != 2 {
		t.Errorf("%d error frames, want 2:\n%s", got, out.String())
	}
}

func TestFrameOnTerminal(t *testing.T) {
	var b bytes.Buffer
	v := viewer{tty: true, out: &b}
	if err := v.frame([]byte("a\nbb\n")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("\x1b[Ha\x1b[K\nbb\x1b[K\n\x1b[J", b.String()); diff != "" {
		t.Error(diff)
	}
}

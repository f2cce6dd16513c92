package wardenproc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitReadyReturnsOnceHealthy(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			t.Errorf("unexpected path %q", r.URL.Path)
		}
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Wait(ctx, srv.URL, nil); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("health polled %d times, want 3 (returns on the first 200)", got)
	}
}

func TestWaitReadyTimesOutWithLastAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	err := Wait(ctx, srv.URL, nil)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("want a timeout error naming the last answer (503), got %v", err)
	}
}

func TestPollStopsWhenTheProcessExits(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	exited := make(chan struct{})
	close(exited)
	last, err := Poll(context.Background(), http.DefaultClient, srv.URL, time.Hour, exited)
	if !errors.Is(err, ErrExited) || last.Status != http.StatusServiceUnavailable || last.String() != "503 Service Unavailable" {
		t.Errorf("Poll = %+v, %v; want the 503 and ErrExited", last, err)
	}
	if _, err := Poll(context.Background(), http.DefaultClient, "http://[::1", time.Hour, nil); err == nil || errors.Is(err, ErrExited) {
		t.Errorf("a bad base: %v, want the request's error", err)
	}
}

// `warden wait` is not silent: at the first answer that is not ready, and
// then every WaitProgressEvery polls, it says what the warden answered and
// how long it has waited (issue 45).
func TestWaitSaysWhyWhileWaiting(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= WaitProgressEvery {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"starting: engines are loading"}}`))
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	if err := Wait(ctx, srv.URL, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := "warden wait: " + srv.URL + " not ready yet (503 Service Unavailable: starting: engines are loading), waited "
	if len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.HasPrefix(lines[1], want) || !strings.HasSuffix(lines[0], " of 1m0s") {
		t.Errorf("progress:\n%s\nwant two lines (the first answer, then the %dth) starting %q", out.String(), WaitProgressEvery, want)
	}
}

func TestWaitSaysWhenNothingAnswers(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out strings.Builder
	err := Wait(ctx, url, &out)
	if err == nil || !strings.Contains(out.String(), "not ready yet (") || !strings.Contains(out.String(), "connection refused") {
		t.Errorf("Wait = %v, progress %q: want a line naming the refused connection", err, out.String())
	}
}

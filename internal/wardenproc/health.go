// Package wardenproc is a warden seen from outside: its /health, asked once
// or polled until it is ready (`warden wait`, `warden run`, the sweep, the
// tests' simulators), and a `warden serve` child started, watched and
// stopped (the sweep's layouts, `warden run --serve`).
package wardenproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/exit"
)

// Health is one answer of GET base/health.
type Health struct {
	Status int    // HTTP status; 0 when nothing answered
	Text   string // the status line, e.g. "503 Service Unavailable"
	Body   []byte // the first 4 KiB of the body
	Err    error  // why nothing answered
}

// OK reports a 200: the warden is ready.
func (h Health) OK() bool { return h.Status == http.StatusOK }

// String is the answer in a few words: the status line, or why there was
// none.
func (h Health) String() string {
	switch {
	case h.Err != nil:
		return h.Err.Error()
	case h.Status == 0:
		return "no answer yet"
	}
	return h.Text
}

// Check asks base/health once. Every answer, and the lack of one, is in
// the Health; the error is for a request that cannot be made (a bad base).
func Check(ctx context.Context, client *http.Client, base string) (Health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return Health{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Health{Err: err}, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return Health{Status: resp.StatusCode, Text: resp.Status, Body: body}, nil
}

// ErrExited is Poll's error when the process it watches exits first.
var ErrExited = errors.New("exited before it was ready")

// Poll asks base/health at once and then every interval until it answers
// 200 (nil), ctx ends (ctx's error), or exited is closed (ErrExited; a nil
// exited is never closed). last is the last answer before that.
func Poll(ctx context.Context, client *http.Client, base string, interval time.Duration, exited <-chan struct{}) (last Health, err error) {
	return poll(ctx, client, base, interval, exited, nil)
}

// poll is Poll, calling each (when not nil) with every answer that was not
// yet a 200 and its number, from 1.
func poll(ctx context.Context, client *http.Client, base string, interval time.Duration, exited <-chan struct{}, each func(n int, h Health)) (last Health, err error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		if last, err = Check(ctx, client, base); err != nil || last.OK() {
			return last, err
		}
		if each != nil {
			each(n, last)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-exited:
			return last, ErrExited
		case <-tick.C:
		}
	}
}

// WaitProgressEvery is how many polls of `warden wait` (half a second
// apart) pass between its progress lines: one line every 5 seconds.
const WaitProgressEvery = 10

// Wait is `warden wait`: it polls base/health every half second until the
// warden answers 200 or ctx ends; the error (exit status 1, or 2 for a bad
// base) names the last answer. Meanwhile it writes to progress (when not
// nil) a line at the first answer that is not ready and then every
// WaitProgressEvery polls: the answer and how long it has waited, so that
// minutes of loading engines, or no warden at all, are not silence.
func Wait(ctx context.Context, base string, progress io.Writer) error {
	start := time.Now()
	limit := ""
	if d, ok := ctx.Deadline(); ok {
		limit = " of " + d.Sub(start).Round(time.Second).String()
	}
	each := func(n int, h Health) {
		if progress != nil && (n == 1 || n%WaitProgressEvery == 0) {
			fmt.Fprintf(progress, "warden wait: %s not ready yet (%s), waited %s%s\n",
				base, h.Reason(), time.Since(start).Round(time.Second), limit)
		}
	}
	last, err := poll(ctx, &http.Client{Timeout: 2 * time.Second}, base, 500*time.Millisecond, nil, each)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return exit.New(1, fmt.Sprintf("warden wait: %s not ready (%s); last answer: %s", base, ctx.Err(), last.Reason()))
	}
	return exit.New(2, fmt.Sprintf("warden wait: bad --url %q: %v", base, err))
}

// Reason is the answer with the warden's own word on it: the status line
// and the error message of a JSON body ("503 Service Unavailable: starting:
// engines are loading"), or why nothing answered.
func (h Health) Reason() string {
	msg := gjson.GetBytes(h.Body, "error.message").String()
	if msg == "" {
		msg = gjson.GetBytes(h.Body, "message").String()
	}
	if h.Err != nil || h.Status == 0 || msg == "" {
		return h.String()
	}
	return h.Text + ": " + msg
}

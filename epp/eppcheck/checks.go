package eppcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// body is a chat request of about size bytes for conversation s. It asks
// for the usage chunk itself, so that a picker that asks for it (as the
// warden does) has nothing to change.
func (c *checker) body(s string, size int) []byte {
	usage := map[string]bool{"include_usage": true}
	b, _ := json.Marshal(map[string]any{"model": c.cfg.Model, "stream": true, "stream_options": usage,
		"messages": []map[string]string{{"role": "user", "content": "eppcheck " + s}}})
	if pad := size - len(b) - 40; pad > 0 {
		b, _ = json.Marshal(map[string]any{"model": c.cfg.Model, "stream": true, "stream_options": usage,
			"messages": []map[string]string{{"role": "system", "content": strings.Repeat("x", pad)},
				{"role": "user", "content": "eppcheck " + s}}})
	}
	return b
}

// split cuts b into n pieces (the last takes the rest).
func split(b []byte, n int) [][]byte {
	var out [][]byte
	step := max(1, len(b)/n)
	for len(b) > step && len(out) < n-1 {
		out = append(out, b[:step])
		b = b[step:]
	}
	return append(out, b)
}

// newSession is a conversation id no earlier check used.
func (c *checker) newSession() string {
	c.session++
	return fmt.Sprintf("eppcheck-%d", c.session)
}

var sse = [][]byte{
	[]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n"),
	[]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n"),
	[]byte("data: [DONE]\n\n"),
}

// turnFor is a normal turn of session s: a body in pieces, an SSE answer.
func (c *checker) turnFor(m mode, s string, pieces int) turn {
	return turn{mode: m, headers: []string{SessionHeader, s, "content-type", "application/json"},
		chunks: split(c.body(s, 0), pieces), answer: sse}
}

func (c *checker) play(ctx context.Context, t turn) (*outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	o, err := play(ctx, c.ext, t)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %s (the gateway would hang): %w", c.cfg.Timeout, err)
	}
	return o, err
}

// validPick checks a pick: the header and the envoy.lb metadata both set
// and equal, every endpoint ip:port; it learns the endpoints.
func (c *checker) validPick(o *outcome) error {
	if o.immediate != nil {
		return fmt.Errorf("answered at once with %d: %s", o.immediate.GetStatus().GetCode(), truncate(string(o.immediate.GetBody()), 160))
	}
	if !o.headerSet {
		return fmt.Errorf("no %s header was set", destinationHeader)
	}
	if o.header != o.metadata {
		return fmt.Errorf("the %s header %q differs from its %s metadata %q (the protocol requires them equal)",
			destinationHeader, o.header, lbNamespace, o.metadata)
	}
	eps := o.endpoints()
	if len(eps) == 0 {
		return fmt.Errorf("the %s header is empty", destinationHeader)
	}
	for _, e := range eps {
		host, port, err := net.SplitHostPort(e)
		if err != nil || net.ParseIP(host) == nil || port == "" {
			return fmt.Errorf("endpoint %q is not ip:port", e)
		}
		if !slices.Contains(c.eps, e) {
			c.eps = append(c.eps, e)
		}
	}
	return nil
}

// sameBody reports whether the picker handed the body back intact: the
// same bytes, or the same JSON but for the model name (a picker may map
// it to the served one).
func sameBody(sent, got []byte) error {
	if bytes.Equal(sent, got) {
		return nil
	}
	var a, b map[string]any
	if json.Unmarshal(sent, &a) == nil && json.Unmarshal(got, &b) == nil {
		delete(a, "model")
		delete(b, "model")
		if reflect.DeepEqual(a, b) {
			return nil
		}
	}
	if len(got) == 2*len(sent) {
		return fmt.Errorf("the body came back twice (%d bytes for %d sent)", len(got), len(sent))
	}
	return fmt.Errorf("the body came back changed: %d bytes for %d sent (%q...)", len(got), len(sent), truncate(string(got), 80))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func (c *checker) checkHealth(ctx context.Context) {
	for _, svc := range []string{"liveness", "readiness", extProcService} {
		name := fmt.Sprintf("health %q", svc)
		r, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		switch {
		case err != nil:
			c.add(name, Fail, "grpc.health.v1 Check: %v (the protocol requires liveness, readiness and the ext_proc service)", err)
		case r.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			c.add(name, Fail, "%v with engines behind it (want SERVING)", r.GetStatus())
		default:
			c.add(name, Pass, "SERVING")
		}
	}
}

func (c *checker) checkPick(m mode) func(context.Context) {
	return func(ctx context.Context) {
		name := m.String() + ": a turn"
		s := c.newSession()
		t := c.turnFor(m, s, 16)
		o, err := c.play(ctx, t)
		if err == nil {
			err = c.validPick(o)
		}
		if err == nil {
			err = sameBody(bytes.Join(t.chunks, nil), o.body)
		}
		if err == nil && m == duplex && !bytes.Equal(o.answer, bytes.Join(sse, nil)) {
			err = fmt.Errorf("the answer reached the client changed: %q", truncate(string(o.answer), 120))
		}
		if err != nil {
			c.add(name, Fail, "%v", err)
			return
		}
		c.add(name, Pass, "a body in %d pieces picked %s; header equals envoy.lb metadata; body handed back intact; SSE answer passed through",
			len(t.chunks), o.header)
	}
}

func (c *checker) checkLargeBody(m mode) func(context.Context) {
	return func(ctx context.Context) {
		name := fmt.Sprintf("%s: a %d-byte body", m, c.cfg.MaxBody)
		s := c.newSession()
		body := c.body(s, c.cfg.MaxBody)
		t := turn{mode: m, headers: []string{SessionHeader, s}, chunks: split(body, max(1, len(body)/(64<<10))), answer: sse}
		o, err := c.play(ctx, t)
		if err == nil {
			err = c.validPick(o)
		}
		if err == nil {
			err = sameBody(body, o.body)
		}
		if err != nil {
			c.add(name, Fail, "%v (a picker must take bodies up to its limit: raise the gRPC server's max receive size to it; check a smaller limit with --max-body-bytes)", err)
			return
		}
		how := fmt.Sprintf("in %d pieces", len(t.chunks))
		if m == buffered {
			how = "as one gRPC message"
		}
		c.add(name, Pass, "%s: picked %s, handed back intact", how, o.header)
	}
}

func (c *checker) checkTrailers(ctx context.Context) {
	name := "full-duplex: a body followed by trailers"
	s := c.newSession()
	t := c.turnFor(duplex, s, 4)
	t.trailers = true
	o, err := c.play(ctx, t)
	if err == nil {
		err = c.validPick(o)
	}
	if err == nil {
		err = sameBody(bytes.Join(t.chunks, nil), o.body)
	}
	if err != nil {
		c.add(name, Fail, "%v", err)
		return
	}
	c.add(name, Pass, "picked %s; the body handed back once, replacing the request's (CONTINUE_AND_REPLACE)", o.header)
}

func (c *checker) checkEmptyBody(m mode) func(context.Context) {
	return func(ctx context.Context) {
		name := m.String() + ": an empty chunked POST"
		s := c.newSession()
		t := turn{mode: m, headers: []string{SessionHeader, s, "transfer-encoding", "chunked"}, chunks: [][]byte{{}}, answer: sse}
		o, err := c.play(ctx, t)
		if err == nil && o.immediate == nil {
			err = c.validPick(o)
			if err == nil && len(o.body) != 0 {
				err = fmt.Errorf("an empty body came back as %d bytes", len(o.body))
			}
		}
		if err != nil {
			c.add(name, Fail, "%v", err)
			return
		}
		if o.immediate != nil {
			c.add(name, Pass, "answered at once with %d", o.immediate.GetStatus().GetCode())
			return
		}
		c.add(name, Pass, "picked %s; the empty body ended in the mode's message", o.header)
	}
}

func (c *checker) checkNoBody(m mode) func(context.Context) {
	return func(ctx context.Context) {
		name := m.String() + ": GET /v1/models without a body"
		o, err := c.play(ctx, turn{mode: m, method: "GET", path: "/v1/models", answer: [][]byte{[]byte(`{"data":[]}`)}})
		if err == nil && o.immediate == nil && o.headerSet {
			err = c.validPick(o)
		}
		switch {
		case err != nil:
			c.add(name, Fail, "%v", err)
		case o.immediate != nil:
			c.add(name, Pass, "answered at once with %d", o.immediate.GetStatus().GetCode())
		case o.headerSet:
			c.add(name, Pass, "headers answered with a pick (%s)", o.header)
		default:
			c.add(name, Pass, "headers answered without a pick (the gateway's own balancing)")
		}
	}
}

// checkServed plays an answer that the gateway served on another endpoint
// than the pick (a retry on a fallback): the picker must go on with the
// exchange.
func (c *checker) checkServed(ctx context.Context) {
	name := "served-endpoint report (a fallback served)"
	s := c.newSession()
	t := c.turnFor(duplex, s, 2)
	probe, err := c.play(ctx, t)
	if err == nil {
		err = c.validPick(probe)
	}
	if err != nil {
		c.add(name, Fail, "%v", err)
		return
	}
	other := ""
	for _, e := range c.eps {
		if e != probe.endpoints()[0] {
			other = e
		}
	}
	if other == "" {
		c.add(name, NotChecked, "the picker named only one endpoint (%s): no other to report as served", probe.header)
		return
	}
	t.servedOn = other
	o, err := c.play(ctx, t)
	if err == nil {
		err = c.validPick(o)
	}
	if err == nil && !bytes.Equal(o.answer, bytes.Join(sse, nil)) {
		err = fmt.Errorf("the answer reached the client changed: %q", truncate(string(o.answer), 120))
	}
	if err != nil {
		c.add(name, Fail, "%v", err)
		return
	}
	c.add(name, Pass, "picked %s, reported served on %s under %s/%s: the answer passed through", o.endpoints()[0], other, lbNamespace, servedKey)
}

func (c *checker) checkHeadersOnlyAnswer(ctx context.Context) {
	name := "an answer with headers only (500, empty body)"
	t := c.turnFor(duplex, c.newSession(), 2)
	t.status, t.noMessage = 500, true
	o, err := c.play(ctx, t)
	if err == nil {
		err = c.validPick(o)
	}
	if err != nil {
		c.add(name, Fail, "%v", err)
		return
	}
	c.add(name, Pass, "the response headers ended the exchange cleanly")
}

func (c *checker) checkSubset(ctx context.Context) {
	if len(c.eps) == 0 {
		c.add("subset hint", NotChecked, "no endpoint was learned from the earlier picks")
		return
	}
	target := c.eps[len(c.eps)-1]
	strs := func(v ...string) *structpb.Value {
		l := make([]any, len(v))
		for i, s := range v {
			l[i] = s
		}
		x, _ := structpb.NewList(l)
		return structpb.NewListValue(x)
	}
	cases := []struct {
		name   string
		subset *structpb.Value
		want   string // "" = a 503
	}{
		{"subset hint as a list [" + target + "]", strs(target), target},
		{"subset hint as a string \"" + target + "\"", structpb.NewStringValue(target), target},
		{"subset hint as a list of one unknown endpoint", strs("192.0.2.1:9"), ""},
		{"subset hint as an empty list", strs(), ""},
		{"subset hint as an empty string", structpb.NewStringValue(""), ""},
	}
	for _, tc := range cases {
		t := c.turnFor(duplex, c.newSession(), 2)
		t.subset = tc.subset
		o, err := c.play(ctx, t)
		switch {
		case err != nil:
			c.add(tc.name, Fail, "%v", err)
		case tc.want == "" && o.immediate == nil:
			c.add(tc.name, Fail, "picked %q; want an immediate 503 (nothing eligible)", o.header)
		case tc.want == "" && o.immediate.GetStatus().GetCode() != 503:
			c.add(tc.name, Fail, "answered at once with %d; want 503", o.immediate.GetStatus().GetCode())
		case tc.want == "":
			c.add(tc.name, Pass, "immediate answer 503 (%s)", truncate(string(o.immediate.GetBody()), 100))
		default:
			if err := c.validPick(o); err != nil {
				c.add(tc.name, Fail, "%v", err)
				continue
			}
			if i := slices.IndexFunc(o.endpoints(), func(e string) bool { return e != tc.want }); i >= 0 {
				c.add(tc.name, Fail, "named %s outside the hint (%s)", o.endpoints()[i], o.header)
				continue
			}
			c.add(tc.name, Pass, "picked %s only", o.header)
		}
	}
}

// checkAborts has one conversation's client go away five times each way
// (half-closed before the first byte, reset before it, mid-answer); its
// next turn must still land where it did: a client that gives up is no
// engine failure. A picker that does not keep a conversation on one
// endpoint cannot show it: not checked.
func (c *checker) checkAborts(m mode) func(context.Context) {
	return func(ctx context.Context) {
		name := m.String() + ": clients that go away (5 before the first byte half-closed, 5 reset, 5 mid-answer)"
		s := c.newSession()
		first, err := c.play(ctx, c.turnFor(m, s, 2))
		if err == nil {
			err = c.validPick(first)
		}
		if err != nil {
			c.add(name, Fail, "the first turn: %v", err)
			return
		}
		again, err := c.play(ctx, c.turnFor(m, s, 2))
		if err == nil {
			err = c.validPick(again)
		}
		if err != nil {
			c.add(name, Fail, "the second turn: %v", err)
			return
		}
		sticky := again.endpoints()[0] == first.endpoints()[0]
		for _, a := range []abort{abortHalf, abortCancel, abortMidBody} {
			for range 5 {
				t := c.turnFor(m, s, 2)
				t.abort = a
				if _, err := c.play(ctx, t); err != nil {
					c.add(name, Fail, "an aborted turn: %v", err)
					return
				}
			}
		}
		after, err := c.play(ctx, c.turnFor(m, s, 2))
		if err == nil {
			err = c.validPick(after)
		}
		switch {
		case err != nil:
			c.add(name, Fail, "the turn after the aborts: %v", err)
		case !sticky:
			c.add(name, NotChecked, "the picker does not keep a conversation (%s) on one endpoint, so an engine taken out would not show; the turn after the aborts was answered (%s)",
				SessionHeader, after.header)
		case after.endpoints()[0] != first.endpoints()[0]:
			c.add(name, Fail, "the conversation moved from %s to %s after its client went away 15 times: the picker counted the client's aborts as the engine's failures",
				first.endpoints()[0], after.endpoints()[0])
		default:
			c.add(name, Pass, "the conversation stayed on %s through 15 aborts", first.endpoints()[0])
		}
	}
}

func (c *checker) checkConcurrent(ctx context.Context) {
	n := c.cfg.Concurrent
	name := fmt.Sprintf("%d concurrent streams", n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		t := c.turnFor(mode(i%2), fmt.Sprintf("eppcheck-load-%d", i%(n/4+1)), 3)
		if i%5 == 4 {
			t.abort = abortHalf
		}
		wg.Go(func() {
			o, err := c.play(ctx, t)
			if err == nil && t.abort == noAbort && o.immediate != nil {
				err = fmt.Errorf("answered at once with %d", o.immediate.GetStatus().GetCode())
			}
			if err == nil && t.abort == noAbort && !o.headerSet {
				err = fmt.Errorf("no pick")
			}
			errs[i] = err
		})
	}
	wg.Wait()
	failed := 0
	var firstErr error
	for _, err := range errs {
		if err != nil {
			failed++
			firstErr = cmpFirst(firstErr, err)
		}
	}
	if failed > 0 {
		c.add(name, Fail, "%d of %d failed; the first: %v", failed, n, firstErr)
		return
	}
	c.add(name, Pass, "both body modes, one in five aborted: every other stream picked and answered")
}

func cmpFirst(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// checkHealthAfter: after all that, the picker still reports ready.
func (c *checker) checkHealthAfter(ctx context.Context) {
	name := "readiness after the checks"
	r, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	switch {
	case err != nil:
		c.add(name, Fail, "%v", err)
	case r.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		c.add(name, Fail, "%v: the aborts and odd requests took the picker's engines out", r.GetStatus())
	default:
		c.add(name, Pass, "still SERVING")
	}
}

// checkDrain watches readiness while the picker is made to drain.
func (c *checker) checkDrain(ctx context.Context) {
	name := "readiness NOT_SERVING while draining"
	if c.cfg.Drain == nil {
		c.add(name, NotChecked, "the check cannot make the picker drain from outside (a Go test can: eppcheck.Config.Drain)")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	w, err := c.health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	if err == nil {
		_, err = w.Recv() // the current status
	}
	if err == nil {
		err = c.cfg.Drain()
	}
	for err == nil {
		var r *healthpb.HealthCheckResponse
		if r, err = w.Recv(); err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
			c.add(name, Pass, "readiness went NOT_SERVING after the drain began")
			return
		}
	}
	c.add(name, Fail, "readiness never reported NOT_SERVING while draining: %v", err)
}

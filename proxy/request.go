package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lmwarden/warden/proxy/compat"
	"github.com/lmwarden/warden/router/decision"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/tap"
)

// The request path, top down: read the body, identify (and adapt) the
// request, place it or hold it (the Placer), forward it to the replica
// with the answer streamed back through the usage tap, account for it and
// log the decision. serveProxied is the straight line; the steps follow
// in its order.

// serveProxied places and forwards one /v1/* request, retrying on another
// replica only when it provably never reached an engine.
func (p *Proxy) serveProxied(w http.ResponseWriter, r *http.Request) {
	start := p.clock()
	// Read.
	if msg := badContentType(r); msg != "" {
		writeError(w, http.StatusUnsupportedMediaType, msg)
		return
	}
	body, ok := p.readBody(w, r)
	if !ok {
		return
	}
	// Identify.
	req := p.prepare(r, body)
	if req.refuse != "" {
		compat.WriteModelNotFound(w, r.URL.Path, req.refuse)
		return
	}
	pin, pinned, err := identity.ParsePin(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// Place or hold, then forward (and account); again elsewhere while the
	// request never reached an engine. Each try skips the replicas tried
	// before (they are unavailable to the policies), so the tries end.
	pr := place.Request{Key: req.key.Key, Subagent: req.key.Subagent && (req.key.Agent == "" || !p.cfg.SubagentsWithParent),
		Pinned: pinned, Pin: pin, BodyBytes: len(req.body)}
	for {
		pl := p.placer.Place(r.Context(), pr)
		if pl.Rank < 0 {
			if pl.Reason == place.ReasonWait { // client went away while held
				w.WriteHeader(499)
				return
			}
			break
		}
		if !p.forward(w, r, req, &pl, start) {
			return
		}
		pr.Skip = append(pr.Skip, pl.Rank)
	}
	msg := "no replica is available"
	if pinned {
		msg = fmt.Sprintf("replica %d (X-Warden-Replica) does not exist or is not available", pin)
	}
	writeError(w, http.StatusServiceUnavailable, msg)
}

// badContentType returns a message when r posts a body with a content type
// that is not JSON to an endpoint that only takes JSON; "" when fine. A
// missing content type is let through.
func badContentType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if r.Method != http.MethodPost || ct == "" || ct == "application/json" || !jsonOnly(r.URL.Path) {
		return "" // (the common type itself needs no parse)
	}
	media, _, err := mime.ParseMediaType(ct)
	if err == nil && (media == "application/json" || strings.HasSuffix(media, "+json")) {
		return ""
	}
	return fmt.Sprintf("unsupported content type %q: %s takes application/json", ct, r.URL.Path)
}

// jsonOnly reports whether the path takes a JSON body (vLLM answers other
// content types with 415 there).
func jsonOnly(path string) bool {
	return tap.KindOf(path) != tap.None || path == "/v1/messages/count_tokens" || path == "/v1/embeddings"
}

// Bounds on reading what is left of an over-limit body before the 413.
const (
	drainMaxBytes = 64 << 20
	drainMaxTime  = 10 * time.Second
)

// readBody reads the request body up to the limit, answering 413 itself
// when it is over. Before the 413 it reads and drops the rest of the body
// (up to drainMaxBytes, for drainMaxTime): a client that sends its whole
// body before reading (no Expect: 100-continue, as Python's urllib and
// httpx) would otherwise get a broken pipe instead of the answer.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxBodyBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return nil, false
	}
	if int64(len(body)) > p.cfg.MaxBodyBytes {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainMaxTime))
		if n, _ := io.CopyN(io.Discard, r.Body, drainMaxBytes); n == drainMaxBytes {
			w.Header().Set("Connection", "close") // more is coming: this connection cannot be reused
		}
		writeError(w, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body exceeds the warden's limit of %d bytes (--max-body-bytes)", p.cfg.MaxBodyBytes))
		return nil, false
	}
	return body, true
}

// request is a client request read and prepared for forwarding.
type request struct {
	body   []byte
	key    identity.SessionKey // Key is the placement key: a subagent's own unless SubagentsWithParent
	kind   tap.Kind
	stream bool
	strip  bool   // the warden asked for the usage chunk: drop it from the stream
	refuse string // a model name refused in strict mode: answer 404
	id     string // the client's X-Request-Id, for the decision log
}

// prepare classifies the request, maps its model name to the served one (or
// marks it refused in strict mode), removes Claude Code's billing block
// (unless kept) and the server tools vLLM rejects, asks an OpenAI stream for
// its usage chunk when the client did not, and finds the session key.
func (p *Proxy) prepare(r *http.Request, body []byte) *request {
	req := &request{body: body, kind: tap.KindOf(r.URL.Path)}
	if p.decisions != nil {
		req.id = r.Header.Get(decision.RequestIDHeader)
		req.id = req.id[:min(len(req.id), decision.MaxRequestID)]
	}
	f := identity.Scan(body) // one pass over the top-level keys
	if req.kind != tap.None {
		req.stream = f.Stream.Bool()
	}
	model := p.clients.ResolveModel(f.Model)
	switch model {
	case compat.ModelRefuse:
		req.refuse = strings.Clone(f.Model.Str)
		return req
	case compat.ModelRewrite:
		f.Model = p.clients.ServedModel() // identity sees the served name on every turn
	}
	req.key = identity.ExtractFrom(r.Header, f, p.cfg.SessionHeaders)
	req.key.Key = req.key.Conversation(p.cfg.SubagentsWithParent)
	var drop compat.ToolDrop
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		drop = compat.ServerTools(f.Tools) // read now: the edits below move bytes under f
	}
	// Edits last: they move bytes under f (the key above is a copy).
	if strings.HasPrefix(r.URL.Path, "/v1/messages") && !p.cfg.KeepBillingHeader {
		req.body = compat.StripBilling(req.body, f.System)
	}
	if req.stream && req.kind == tap.OpenAI && !f.StreamOptions.Get("include_usage").Bool() {
		if b, ok := compat.IncludeUsage(req.body, f.StreamOptions); ok {
			req.body, req.strip = b, true
		}
	}
	req.body = p.clients.DropTools(req.body, drop)
	if model == compat.ModelRewrite {
		req.body = p.clients.RewriteModel(req.body)
	}
	return req
}

// attempt is one try of forwarding a request to one replica; the reverse
// proxy's hooks find it in the request context.
type attempt struct {
	rep    *replica
	req    *request
	retry  bool        // never reached the engine: try another replica
	reused atomic.Bool // sent on a kept-alive connection (httptrace GotConn)
	status int
	tap    *tap.Tap
	timer  *time.Timer // the response-header timeout; stopped when headers arrive
	cause  string      // why the attempt failed, for the failure streak
	body   bodyReader  // the body sent (in the attempt: no allocation of its own)
	trace  httptrace.ClientTrace
}

// bodyReader is the request body of one attempt.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

type attemptKey struct{}

// routeHeader names the placement reason on every proxied response.
const routeHeader = "X-Warden-Route"

// routeValues are routeHeader's values, one shared slice per reason.
var routeValues = func() map[place.Reason][]string {
	m := map[place.Reason][]string{}
	for _, r := range []place.Reason{place.ReasonNew, place.ReasonSticky, place.ReasonSpill, place.ReasonPinned,
		place.ReasonFailover, place.ReasonOff, place.ReasonHash, place.ReasonMove} {
		m[r] = []string{string(r)}
	}
	return m
}()

func routeValue(r place.Reason) []string {
	if v, ok := routeValues[r]; ok {
		return v
	}
	return []string{string(r)}
}

// forward sends the request to the placed replica and accounts for it. It
// reports true when the request never reached the engine and may be
// retried elsewhere.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, req *request, pl *placement, start time.Time) bool {
	rep := pl.Replica
	at := &attempt{rep: rep, req: req}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	at.timer = time.AfterFunc(p.cfg.ResponseHeaderTimeout, func() { cancel(errHeaderTimeout) })
	defer at.timer.Stop()
	p.metrics.inFlight.Inc()
	defer func() {
		p.account(at, req, pl, start)
		rep.inflight.Add(-1) // after accounting: in-flight 0 means counted
		p.metrics.inFlight.Dec()
	}()
	at.trace.GotConn = func(c httptrace.GotConnInfo) { at.reused.Store(c.Reused) }
	ctx = httptrace.WithClientTrace(ctx, &at.trace)
	// A shallow copy: the ReverseProxy clones it, header included, for the
	// engine, and Rewrite edits that clone, so r stays as the client sent
	// it for a retry.
	out := r.WithContext(compat.WithRequest(context.WithValue(ctx, attemptKey{}, at), req.body, req.kind))
	at.body.Reset(req.body)
	out.Body = &at.body
	out.ContentLength = int64(len(req.body))
	out.GetBody = nil
	h := w.Header()
	h[identity.PinHeader] = rep.pinHeader // shared, never changed: Set would allocate per request
	h[routeHeader] = routeValue(pl.Reason)
	rep.rp.ServeHTTP(w, out)
	if at.retry {
		h.Del(identity.PinHeader)
		h.Del(routeHeader)
	}
	return at.retry
}

// reverseProxy is replica r's hop: the engine's URL, no client API key or
// pin header, plain bytes for the tap, and the hooks below.
func (p *Proxy) reverseProxy(r *replica, tr http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(r.target)
			pr.SetXForwarded()
			h := pr.Out.Header
			h.Del(identity.PinHeader)
			h.Del("Accept-Encoding") // the tap reads plain bytes
			if p.cfg.APIKey != "" {  // the warden's key is not the engines' business
				h.Del("Authorization")
				h.Del("X-Api-Key")
			}
		},
		Transport:      tr,
		FlushInterval:  -1,
		BufferPool:     copyBuffers,
		ErrorLog:       slog.NewLogLogger(r.log.Handler(), slog.LevelWarn),
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.proxyError,
	}
}

// copyBuffers are the reverse proxies' response copy buffers (32 KiB, as
// httputil allocates per response without a pool).
var copyBuffers = &bufferPool{sync.Pool{New: func() any { return new([copyBuffer]byte) }}}

const copyBuffer = 32 << 10

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return b.p.Get().(*[copyBuffer]byte)[:] }

func (b *bufferPool) Put(x []byte) {
	if len(x) == copyBuffer {
		b.p.Put((*[copyBuffer]byte)(x))
	}
}

// modifyResponse wraps a successful response's body in the usage tap.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	at, _ := resp.Request.Context().Value(attemptKey{}).(*attempt)
	if at == nil {
		return nil
	}
	at.timer.Stop()
	at.status = resp.StatusCode
	if resp.StatusCode >= 500 {
		at.rep.errors.Add(1)
		at.cause = resp.Status
		nameReplicaInError(resp, at.rep.rank)
	}
	if resp.StatusCode == http.StatusOK && at.req.kind != tap.None {
		sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
		ctx, rank, kind := resp.Request.Context(), at.rep.rank, at.req.kind
		o := tap.Options{Stream: at.req.stream, Strip: at.req.strip && sse, Now: p.clock,
			Alive: func() bool { return ctx.Err() == nil }}
		if sse {
			o.Fail = func(err error) []byte { return tap.ErrorEvent(kind, streamBrokeOff(rank, err)) }
		}
		at.tap = tap.New(resp.Body, kind, o)
		resp.Body = at.tap
	}
	return nil
}

// proxyError handles a failed round trip: a dial error means the request
// never reached the engine (retry elsewhere, replica out of rotation); a
// client that went away gets 499; anything else is a 502.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	at, _ := r.Context().Value(attemptKey{}).(*attempt)
	if at == nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	if errors.Is(context.Cause(r.Context()), errHeaderTimeout) {
		at.rep.errors.Add(1)
		at.status, at.cause = http.StatusGatewayTimeout, errHeaderTimeout.Error()
		at.rep.log.Warn("engine sent no response headers in time", "timeout", p.cfg.ResponseHeaderTimeout.String())
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("replica %d: no response headers within %s (--response-header-timeout)",
			at.rep.rank, p.cfg.ResponseHeaderTimeout))
		return
	}
	if r.Context().Err() != nil {
		at.status = 499
		w.WriteHeader(499)
		at.rep.log.Debug("client went away", "error", err)
		return
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		at.retry = true
		at.rep.health.Refused(err)
		return
	}
	if at.reused.Load() && closedBeforeAnswer(err) {
		// A kept-alive connection whose engine went away (crashed, or
		// closed it as idle) before answering: nothing was served there,
		// so the request goes elsewhere, as after a dial error. The health
		// checks decide whether the replica is down.
		at.retry = true
		at.rep.log.Info("engine closed a kept-alive connection before answering; trying another replica", "error", err)
		return
	}
	at.rep.errors.Add(1)
	at.status, at.cause = http.StatusBadGateway, err.Error()
	at.rep.log.Warn("proxy error", "error", err)
	writeError(w, http.StatusBadGateway, "replica "+strconv.Itoa(at.rep.rank)+": "+err.Error())
}

// closedBeforeAnswer reports an error of a connection the engine closed or
// reset before sending any response byte. net.ErrClosed is the same reset
// seen from the request body's write: the transport's read side saw the
// RST first and closed the connection under it.
func closedBeforeAnswer(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// account counts a finished attempt (its route, stickiness, usage and time
// to first byte), logs its decision, and tells the Placer the request
// ended. An attempt that never reached its engine (a retry) only ends.
func (p *Proxy) account(at *attempt, req *request, pl *placement, start time.Time) {
	if at.retry {
		p.placer.End(pl, false, place.Report{}, -1)
		return
	}
	rep := at.rep
	rank := strconv.Itoa(rep.rank)
	if at.tap != nil && at.tap.Failed() != nil {
		rep.errors.Add(1)
		at.status, at.cause = http.StatusBadGateway, at.tap.Failed().Error()
		rep.log.Warn("engine stream broke off", "error", at.tap.Failed())
	}
	if at.status != 499 {
		rep.health.Request(at.status >= 500, at.cause, p.clock(), p.cfg.FailCooldown, p.othersUp(rep))
		countTurn(rep, pl.Reason)
		p.metrics.requests.WithLabelValues(rank, string(pl.Reason)).Inc()
	}
	var raw tap.Usage
	ttfb := -1.0
	if at.tap != nil {
		raw = at.tap.Usage()
		if first := at.tap.FirstByte(); !first.IsZero() {
			ttfb = first.Sub(start).Seconds()
			p.metrics.ttfb.WithLabelValues(rank).Observe(ttfb)
		}
	}
	u := raw
	if u.Known {
		u.Cached = min(u.Cached, u.Prompt)
		rep.prompt.Add(u.Prompt)
		rep.cached.Add(u.Cached)
		rep.completion.Add(u.Completion)
		p.metrics.prompt.WithLabelValues(rank).Add(float64(u.Prompt))
		p.metrics.cached.WithLabelValues(rank).Add(float64(u.Cached))
		p.metrics.completion.WithLabelValues(rank).Add(float64(u.Completion))
		p.series.add(p.clock(), u)
	}
	p.logDecision(at, req, pl, start, u)
	if p.log.Enabled(context.Background(), slog.LevelDebug) { // the arguments would allocate when it is off
		p.log.Debug("routed", "replica", rep.rank, "route", pl.Reason, "session_source", req.key.Source,
			"status", at.status, "prompt_tokens", u.Prompt, "cached_tokens", u.Cached)
	}
	p.placer.End(pl, at.status != 499, place.Report(raw), ttfb)
}

// countTurn adds one served turn to the replica's counter of its reason.
func countTurn(r *replica, reason place.Reason) {
	r.requests.Add(1)
	switch reason {
	case place.ReasonNew:
		r.newTurns.Add(1)
	case place.ReasonSticky:
		r.sticky.Add(1)
	case place.ReasonSpill:
		r.spilledIn.Add(1)
	case place.ReasonPinned:
		r.pinned.Add(1)
	case place.ReasonFailover:
		r.failover.Add(1)
	case place.ReasonOff, place.ReasonHash:
		r.balanced.Add(1)
	}
}

// othersUp reports whether a replica other than r is in rotation.
func (p *Proxy) othersUp(r *replica) bool {
	for _, o := range p.set.Load().list {
		if o != r && o.healthy() {
			return true
		}
	}
	return false
}

// logDecision hands one accounted request to the decision log (nothing
// when the log is off).
func (p *Proxy) logDecision(at *attempt, req *request, pl *placement, start time.Time, u tap.Usage) {
	if p.decisions == nil {
		return
	}
	now := p.clock()
	d := decision.Record{At: now, RequestID: req.id, Source: req.key.Source, Key: req.key.Key, Subagent: req.key.Subagent,
		Policy: pl.Policy, Route: string(pl.Reason), Replica: at.rep.rank, Wait: pl.Waited,
		Prompt: u.Prompt, Cached: u.Cached, Completion: u.Completion, TTFB: -1, Duration: now.Sub(start), Status: at.status}
	if at.tap != nil && !at.tap.FirstByte().IsZero() {
		d.TTFB = at.tap.FirstByte().Sub(start)
	}
	p.decisions.add(d)
}

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
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/lmwarden/warden/internal/apierr"
	"github.com/lmwarden/warden/proxy/compat"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/modelname"
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
		writeError(w, r, http.StatusUnsupportedMediaType, msg)
		return
	}
	body, ok := p.readBody(w, r)
	if !ok {
		return
	}
	// Identify.
	req, err := p.prepare(r, body)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if req.refuse != "" {
		compat.WriteModelNotFound(w, r.URL.Path, req.refuse, p.served)
		return
	}
	// Place or hold, then forward (and account); again elsewhere while the
	// request never reached an engine. Each try skips the replicas tried
	// before (they are unavailable to the policies), so the tries end.
	pr := req.place
	var failed string // the last try that never reached its engine: "replica N: why"
	for {
		pl := p.core.Place(r.Context(), pr)
		if pl.Rank < 0 {
			if pl.Reason == place.ReasonWait { // client went away while held
				w.WriteHeader(499)
				return
			}
			if pl.Reason == place.ReasonBusy { // the admission queue's bound: told to retry
				w.Header().Set("Retry-After", strconv.Itoa(p.core.RetryAfter()))
				writeError(w, r, router.OverloadStatus(r.URL.Path), router.OverloadMessage)
				return
			}
			break
		}
		retry, why := p.forward(w, r, req, &pl, start)
		if !retry {
			return
		}
		failed = fmt.Sprintf("replica %d: %s", pl.Rank, why)
		pr.Skip = append(pr.Skip, pl.Rank)
	}
	switch {
	case failed != "": // no other replica to try: the engine's failure is the answer
		writeError(w, r, http.StatusBadGateway, failed+" (no other replica available)")
	case pr.Pinned:
		writeError(w, r, http.StatusServiceUnavailable, fmt.Sprintf("replica %d (X-Warden-Replica) does not exist or is not available", pr.Pin))
	default:
		writeError(w, r, http.StatusServiceUnavailable, "no replica is available")
	}
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

// knownPath reports whether path is one of the engine APIs the warden
// knows (its usage read, or a JSON endpoint it checks).
func knownPath(path string) bool {
	return tap.KindOf(path) != tap.None || jsonOnly(path) || path == "/v1/models"
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
	body, err := io.ReadAll(io.LimitReader(r.Body, p.maxBody+1))
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "reading request body: "+err.Error())
		return nil, false
	}
	if int64(len(body)) > p.maxBody {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(drainMaxTime))
		if n, _ := io.CopyN(io.Discard, r.Body, drainMaxBytes); n == drainMaxBytes {
			w.Header().Set("Connection", "close") // more is coming: this connection cannot be reused
		}
		writeError(w, r, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body exceeds the warden's limit of %s (--max-body-bytes)", humanize.IBytes(uint64(p.maxBody))))
		return nil, false
	}
	return body, true
}

// request is a client request read and prepared for forwarding.
type request struct {
	body   []byte
	key    identity.SessionKey // Key is the placement key: a subagent's own unless SubagentsWithParent
	place  place.Request
	kind   tap.Kind
	stream bool
	strip  bool   // the warden asked for the usage chunk: drop it from the stream
	refuse string // a model name refused in strict mode: answer 404
	id     string // the client's X-Request-Id, for the decision log
	sessID bool   // the body has a top-level session_id (the engine's label replaces it)
	// replays is how often the request was replayed after an engine closed
	// the connection before answering (Config.MaxReplays bounds it).
	replays int
}

// prepare identifies the request (router.Core.Identify: its API, model
// name and session key; the error is a malformed pin), marks a refused
// model name (strict mode), removes Claude Code's billing block (unless
// kept) and the server tools vLLM rejects, asks an OpenAI stream for its
// usage chunk when the client did not, and maps the model name to the
// served one.
func (p *Proxy) prepare(r *http.Request, body []byte) (*request, error) {
	id, err := p.core.Identify(r.Header, r.URL.Path, body)
	if err != nil {
		return nil, err
	}
	f := &id.Fields
	req := &request{body: body, kind: id.Kind, stream: id.Stream, key: id.Key, place: id.Place, id: id.ID,
		sessID: id.Fields.SessionID.Exists()}
	if id.Model == modelname.Refuse {
		req.refuse = strings.Clone(f.Model.Str)
		return req, nil
	}
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
	if id.Model == modelname.Rewrite {
		req.body = p.core.RewriteModel(req.body)
	}
	req.place.BodyBytes = len(req.body)
	return req, nil
}

// attempt is one try of forwarding a request to one replica; the reverse
// proxy's hooks find it in the request context.
type attempt struct {
	rep        *router.Replica
	req        *request
	retry      router.Retry            // not Served: never reached the engine, try another replica
	err        error                   // the connection error of a retry
	noEndpoint bool                    // the engine has no such endpoint: not a turn
	client     context.Context         // the client's request context (the attempt's is derived from it)
	cancel     context.CancelCauseFunc // cancels the attempt (header timeout, a stalled stream)
	stalled    atomic.Bool             // the stream sent nothing for --stream-idle-timeout
	status     int
	tap        *tap.Tap
	timer      *time.Timer // the response-header timeout; stopped when headers arrive
	cause      string      // why the attempt failed, for the failure streak
	body       bodyReader  // the body sent (in the attempt: no allocation of its own)
	label      []string    // the conversation's label for the engine (router.SessionIDHeader); nil none
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
// reports retry when the request never reached the engine and may be
// replayed elsewhere, and why.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, req *request, pl *router.Placement, start time.Time) (retry bool, why string) {
	rep := pl.Replica
	at := &attempt{rep: rep, req: req, client: r.Context()}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	at.cancel = cancel
	at.timer = time.AfterFunc(p.cfg.ResponseHeaderTimeout, func() { cancel(errHeaderTimeout) })
	defer at.timer.Stop()
	defer func() { p.core.Finish(pl, p.outcome(at, req, start)) }()
	// A shallow copy: the ReverseProxy clones it, header included, for the
	// engine, and Rewrite edits that clone, so r stays as the client sent
	// it for a retry.
	body, label := p.core.ForEngine(pl, req.kind, req.sessID, req.body)
	if label != "" {
		at.label = []string{label}
	}
	out := r.WithContext(compat.WithRequest(context.WithValue(ctx, attemptKey{}, at), body, req.kind))
	at.body.Reset(body)
	out.Body = &at.body
	out.ContentLength = int64(len(body))
	out.GetBody = nil
	h := w.Header()
	h[identity.PinHeader] = rep.RankValue() // shared, never changed: Set would allocate per request
	h[routeHeader] = routeValue(pl.Reason)
	p.rp.ServeHTTP(w, out)
	if at.retry != router.Served {
		h.Del(identity.PinHeader)
		h.Del(routeHeader)
		if at.retry == router.Reset {
			return true, "the engine closed the connection before answering: " + at.err.Error()
		}
		return true, at.err.Error()
	}
	return false, ""
}

// reverseProxy is the hop to every replica: the placed engine's URL (the
// attempt in the request's context names it), no client API key or pin
// header, plain bytes for the tap, and the hooks below.
func (p *Proxy) reverseProxy(tr http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			at := pr.In.Context().Value(attemptKey{}).(*attempt)
			rep := at.rep
			pr.SetURL(rep.URL())
			pr.SetXForwarded()
			h := pr.Out.Header
			h.Del(identity.PinHeader)
			if at.label != nil { // the warden's label, never the client's own value (the engine publishes it)
				h[router.SessionIDHeader] = at.label
			} else {
				h.Del(router.SessionIDHeader)
			}
			if dp := rep.DPRank(); dp != nil { // one engine of a vLLM data-parallel server
				h[router.DPRankHeader] = dp
				if strings.HasPrefix(pr.In.URL.Path, "/v1/responses") {
					rep.PinIgnored(pr.In.URL.Path)
				}
			}
			h.Del("Accept-Encoding") // the tap reads plain bytes
			if p.cfg.APIKey != "" {  // the warden's key is not the engines' business
				h.Del("Authorization")
				h.Del("X-Api-Key")
			}
		},
		Transport:      tr,
		FlushInterval:  -1,
		BufferPool:     copyBuffers,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
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
		at.cause = resp.Status
		nameReplicaInError(resp, at.rep.Rank())
	}
	if resp.StatusCode == http.StatusNotFound && at.req.kind == tap.None && !knownPath(resp.Request.URL.Path) {
		// A path the warden passes on that the engine does not serve: say
		// so in the API's shape, and count no turn.
		at.noEndpoint = true
		resp.Body.Close()
		b := apierr.Body(resp.Request.URL.Path, http.StatusNotFound, fmt.Sprintf(
			"replica %d: the engine does not serve %s (the warden passes every /v1/* path on to the engines)", at.rep.Rank(), resp.Request.URL.Path))
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		resp.Header.Set("Content-Type", "application/json")
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	}
	if resp.StatusCode == http.StatusOK && at.req.kind != tap.None {
		sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
		ctx, client, rank, kind := resp.Request.Context(), at.client, at.rep.Rank(), at.req.kind
		o := tap.Options{Stream: at.req.stream, Strip: at.req.strip && sse, Now: p.clock,
			Alive: func() bool { return client.Err() == nil }}
		if sse {
			o.Fail = func(err error) []byte {
				if cause := context.Cause(ctx); errors.Is(cause, errStreamIdle) {
					err = cause
				}
				return tap.ErrorEvent(kind, streamBrokeOff(rank, err))
			}
			if p.cfg.StreamIdleTimeout > 0 {
				resp.Body = &idleBody{ReadCloser: resp.Body, idle: p.cfg.StreamIdleTimeout, stalled: func() {
					at.stalled.Store(true)
					at.cancel(errStreamIdle)
				}}
			}
		}
		at.tap = tap.New(resp.Body, kind, o)
		resp.Body = at.tap
	}
	return nil
}

// idleBody ends a stream whose engine stopped sending: after the first
// byte (a queued request, still before its first token, is never cut), a
// Read that waits idle for the engine calls stalled, which cancels the
// attempt; the tap then ends the client's stream with the error event of a
// broken stream. The clock runs only while the proxy waits on the engine
// (inside Read): while it is blocked writing to a client that stopped
// reading, the engine is not silent, it is held up, and is not blamed.
type idleBody struct {
	io.ReadCloser
	idle    time.Duration
	stalled func()
	timer   *time.Timer // nil until the first byte
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.timer != nil {
		b.timer.Reset(b.idle) // waiting on the engine from now
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case b.timer != nil:
		b.timer.Stop() // the wait is over: the client's turn
	case n > 0:
		b.timer = time.AfterFunc(b.idle, b.stalled)
		b.timer.Stop()
	}
	return n, err
}

func (b *idleBody) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	return b.ReadCloser.Close()
}

// proxyError handles a failed round trip: a dial error means the request
// never reached the engine (retry elsewhere, replica out of rotation); a
// client that went away gets 499; anything else is a 502.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	at, _ := r.Context().Value(attemptKey{}).(*attempt)
	if at == nil {
		writeError(w, r, http.StatusBadGateway, err.Error())
		return
	}
	if errors.Is(context.Cause(r.Context()), errHeaderTimeout) {
		at.status, at.cause = http.StatusGatewayTimeout, errHeaderTimeout.Error()
		at.rep.Log().Warn("engine sent no response headers in time", "timeout", p.cfg.ResponseHeaderTimeout.String())
		writeError(w, r, http.StatusGatewayTimeout, fmt.Sprintf("replica %d: no response headers within %s (--response-header-timeout)",
			at.rep.Rank(), p.cfg.ResponseHeaderTimeout))
		return
	}
	if r.Context().Err() != nil {
		at.status = 499
		w.WriteHeader(499)
		at.rep.Log().Debug("client went away", "error", err)
		return
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		at.retry, at.err = router.Refused, err // the core takes the replica out of rotation
		return
	}
	if closedBeforeAnswer(err) {
		// The engine closed or reset the connection before any answer
		// byte (it crashed, was killed, or closed a kept-alive connection
		// as idle): nothing was served, so the request (its body is
		// buffered) goes elsewhere, as after a refused dial. The client
		// has seen nothing yet; a request that got any answer byte is
		// never replayed (its errors come through the tap). The health
		// checks decide whether the replica is down.
		cause := "the engine closed the connection before answering: " + err.Error()
		if at.req.replays >= p.cfg.MaxReplays {
			// The replays are used up: the request may be what takes the
			// engines down. The engine's failure is the answer.
			p.core.ReplayRefused()
			at.status, at.cause = http.StatusBadGateway, cause
			at.rep.Log().Warn("not replayed again", "replays", at.req.replays, "error", err)
			writeError(w, r, http.StatusBadGateway, fmt.Sprintf("replica %d: %s (the request was replayed %d times already, --max-replays)",
				at.rep.Rank(), cause, at.req.replays))
			return
		}
		at.req.replays++
		at.retry, at.err = router.Reset, err
		return
	}
	at.status, at.cause = http.StatusBadGateway, err.Error()
	at.rep.Log().Warn("proxy error", "error", err)
	writeError(w, r, http.StatusBadGateway, "replica "+strconv.Itoa(at.rep.Rank())+": "+err.Error())
}

// closedBeforeAnswer reports an error of a connection the engine closed or
// reset before sending any response byte. net.ErrClosed is the same reset
// seen from the request body's write: the transport's read side saw the
// RST first and closed the connection under it.
func closedBeforeAnswer(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// outcome is what the attempt saw, for the core's accounting: a stream
// that broke off after its headers counts as a 502.
func (p *Proxy) outcome(at *attempt, req *request, start time.Time) router.Outcome {
	o := router.Outcome{Retry: at.retry, Err: at.err, NoEndpoint: at.noEndpoint, Status: at.status, Cause: at.cause, Start: start, Key: req.key, RequestID: req.id}
	if at.tap != nil {
		if err := at.tap.Failed(); err != nil {
			o.Status, o.Cause = http.StatusBadGateway, err.Error()
			if at.stalled.Load() {
				o.Cause = errStreamIdle.Error()
				// A wedged engine: out of the rotation until a health
				// check succeeds, so the next request goes elsewhere.
				at.rep.Refused(fmt.Errorf("%w: nothing for %v (--stream-idle-timeout)", errStreamIdle, p.cfg.StreamIdleTimeout))
			}
			at.rep.Log().Warn("engine stream broke off", "error", o.Cause)
		}
		o.Usage, o.FirstByte, o.FirstToken = at.tap.Usage(), at.tap.FirstByte(), at.tap.FirstToken()
	}
	return o
}

package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/lmwarden/warden/admin"
	"github.com/lmwarden/warden/internal/apierr"
	"github.com/lmwarden/warden/proxy/compat"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/tap"
)

// The defaults of the HTTP data plane's settings, stated once (the command
// layer gives its flags these values; a zero field means the same).
const (
	DefaultResponseHeaderTimeout = 10 * time.Minute
	// DefaultMaxReplays is how often a request that reached an engine which
	// then closed the connection before answering is replayed elsewhere.
	DefaultMaxReplays = 1
	// DefaultStreamIdleTimeout is longer than any pause of a healthy
	// stream: a decode step takes well under a second, but a request that
	// vLLM preempts mid-stream (its KV cache full) goes silent until it is
	// scheduled and prefilled again, which under deliberate overload takes
	// as long as a first token: up to 83 s at p95 on the reference rig at
	// 32 sessions (docs/reliability.md). Five minutes clears that with room.
	DefaultStreamIdleTimeout = 5 * time.Minute
)

// Config configures a Proxy: the HTTP data plane's own settings (the
// core's are router.Config). Each field says what its zero value means.
type Config struct {
	// KeepBillingHeader forwards Claude Code's billing system block
	// instead of removing it.
	KeepBillingHeader bool
	// AdminToken is the bearer token for admin changes from callers that
	// are not on loopback; "" = loopback only.
	AdminToken string
	// APIKey is what clients must send (Authorization: Bearer or
	// x-api-key) on /v1/*; "" = no key.
	APIKey string
	// ResponseHeaderTimeout bounds the wait for an engine's response
	// headers (a stream's come at once, a non-streaming answer's when it is
	// complete); then the client gets 504 naming the replica. 0 =
	// DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// StreamIdleTimeout ends a stream that has sent its first byte and then
	// nothing for this long (a wedged or stopped engine): the client gets
	// the error event of a broken stream, the engine request is cancelled
	// and the replica leaves the rotation until a health check succeeds.
	// Before the first byte nothing is cut: a queued request waits (the
	// engine's running/waiting counters tell a queue from a wedge). 0 =
	// DefaultStreamIdleTimeout, < 0 = never.
	StreamIdleTimeout time.Duration
	// MaxReplays bounds how often one request is replayed on another
	// replica after an engine closed or reset the connection before any
	// answer byte (it may have crashed on the request itself: a request
	// that kills engines must not visit every replica). A refused
	// connection is no replay (the request never left) and is tried
	// elsewhere without a bound. 0 = DefaultMaxReplays, < 0 = none.
	MaxReplays int
}

// Validate checks the settings a user gives (each named by the warden flag
// that sets it); zero values are valid. The core's are router.Config.Validate's.
func (c Config) Validate() error {
	if c.ResponseHeaderTimeout < 0 {
		return fmt.Errorf("--response-header-timeout must be >= 0 (0 means %v), got %v", DefaultResponseHeaderTimeout, c.ResponseHeaderTimeout)
	}
	return nil
}

// Core is the view of the router core the HTTP data plane needs: the admin
// endpoints' view, identifying, placing and finishing a request, and what
// /v1/models answers (router.Core has it; proxy_test.go asserts so).
type Core interface {
	admin.Core
	Config() router.Config
	Logger() *slog.Logger
	Client() *http.Client
	Since() time.Time
	Models(ctx context.Context) ([]byte, bool)
	Identify(h http.Header, path string, body []byte) (router.Request, error)
	RewriteModel(body []byte) []byte
	Place(ctx context.Context, req place.Request) router.Placement
	RetryAfter() int
	Finish(pl *router.Placement, o router.Outcome) router.Placement
	ForEngine(pl *router.Placement, kind tap.Kind, sessionField bool, body []byte) ([]byte, string)
	ReplayRefused()
}

// Proxy is the HTTP data plane over a router core: it reads a client's
// request, identifies it, asks the core where it goes, forwards it with the
// answer streamed back through the usage tap, and hands the outcome to the
// core. Create it with New.
type Proxy struct {
	core    Core
	cfg     Config
	maxBody int64  // the core's MaxBodyBytes
	served  string // the core's ServedModel
	log     *slog.Logger
	clock   func() time.Time
	handler http.Handler
	clients *compat.Clients        // request adaptations logged
	rp      *httputil.ReverseProxy // one for every replica: the attempt names the target
	tr      *http.Transport        // the requests' connections to the engines
}

// New builds the HTTP data plane in front of core.
func New(core Core, cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ResponseHeaderTimeout == 0 {
		cfg.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	switch {
	case cfg.MaxReplays == 0:
		cfg.MaxReplays = DefaultMaxReplays
	case cfg.MaxReplays < 0:
		cfg.MaxReplays = 0
	}
	cc := core.Config()
	p := &Proxy{core: core, cfg: cfg, maxBody: cc.MaxBodyBytes, served: cc.ServedModel, log: core.Logger(), clock: cc.Clock}
	p.clients = compat.New(p.log)
	hints := compat.FlagHints{Launched: cc.Engines != nil}
	if cc.Engines != nil {
		hints.ToolsFix = cc.Engines.ToolsFix
	}
	p.tr = router.NewTransport()
	p.rp = p.reverseProxy(&compat.Transport{Next: p.tr, Clients: p.clients, Hints: hints})
	mux := http.NewServeMux()
	admin.New(core, cfg.AdminToken).Register(mux)
	mux.HandleFunc("HEAD /api/hello", func(w http.ResponseWriter, _ *http.Request) {}) // Claude Code's pre-warm
	mux.HandleFunc("GET /v1/models", p.requireKey(p.serveModels))
	mux.HandleFunc("/v1/", p.requireKey(p.serveProxied))
	p.handler = withAPIHint(mux)
	return p, nil
}

// Handler returns the warden's HTTP handler: proxied /v1/* and the admin
// endpoints.
func (p *Proxy) Handler() http.Handler { return p.handler }

// CloseIdleConnections closes the idle connections to the engines, the
// requests' and the core's.
func (p *Proxy) CloseIdleConnections() {
	p.tr.CloseIdleConnections()
	p.core.Client().CloseIdleConnections()
}

// serveModels answers with what the engines say of their model, the id set
// to the served name (router.Core.Models). Without a healthy replica to ask
// it answers with the name alone; with no served name configured it passes
// the request to a replica.
func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	if p.served == "" {
		p.serveProxied(w, r)
		return
	}
	if body, ok := p.core.Models(r.Context()); ok {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{{
		"id": p.served, "object": "model", "created": p.core.Since().Unix(), "owned_by": "warden",
	}}})
}

// writeError answers with the warden's error body in the shape of the API
// the client called (internal/apierr).
func writeError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	apierr.WriteFor(w, r.URL.Path, code, msg)
}

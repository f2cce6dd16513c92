// Package admin is the warden's own HTTP endpoints over the router core:
// /health, /metrics, /warden/status and the page, /warden/policy,
// /warden/reset_prefix_cache and /warden/replicas. Every data plane mounts
// it (proxy beside its /v1/* path; epp on its HTTP port). Handlers return
// an error; one place writes it (as Caddy's admin API does): an *Error
// carries its status, anything else is a 500.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lmwarden/warden/internal/apierr"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/schema"
)

// Core is the narrow view of the router core the endpoints need
// (*router.Core has it).
type Core interface {
	Status() schema.Status
	Starting() bool
	Ready() bool
	Policy() router.PolicyInfo
	SetPolicy(name string) (previous string, err error)
	ResetPrefixCache(ctx context.Context) []router.ResetResult
	AddReplica(b router.Backend) (router.ReplicaInfo, error)
	RemoveReplica(url string, rank int) (router.ReplicaInfo, error)
	CheckReplica(ctx context.Context, rank int)
	FallbackMaxNumSeqs() int
	Registry() *prometheus.Registry
}

// Admin serves the endpoints. Changes (POST, DELETE) need a loopback
// caller or the admin bearer token.
type Admin struct {
	core  Core
	token string
	check func(router.Backend) error // CheckReplicas; nil = none
}

// CheckReplicas makes POST /warden/replicas refuse (400) a replica check
// rejects: a data plane's own rule (the picker names endpoints as ip:port).
func (a *Admin) CheckReplicas(check func(router.Backend) error) *Admin {
	a.check = check
	return a
}

// New returns the endpoints over core; token is the bearer token that lets
// a caller that is not on loopback make changes ("" = loopback only).
func New(core Core, token string) *Admin { return &Admin{core: core, token: token} }

// Error is an admin error with its HTTP status.
type Error struct {
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(code int, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// handler is an endpoint that returns its error.
type handler func(w http.ResponseWriter, r *http.Request) error

// ServeHTTP runs h and writes its error, the one place that does.
func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := h(w, r)
	if err == nil {
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: http.StatusInternalServerError, Msg: err.Error()}
	}
	apierr.Write(w, e.Code, e.Msg)
}

// Register adds the endpoints to mux.
func (a *Admin) Register(mux *http.ServeMux) {
	reg := a.core.Registry()
	mux.Handle("GET /health", handler(a.health))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("GET "+panel.StatusPath, panel.JSONHandler(a.core.Status))
	mux.Handle("GET /warden/policy", handler(a.policy))
	mux.Handle("POST /warden/policy", a.changes(a.setPolicy))
	mux.Handle("POST /warden/reset_prefix_cache", a.changes(a.resetPrefixCache))
	mux.Handle("GET /warden/replicas", handler(a.replicas))
	mux.Handle("POST /warden/replicas", a.changes(a.addReplica))
	mux.Handle("DELETE /warden/replicas", a.changes(a.removeReplica))
	mux.Handle(panel.PagePath, panel.PageHandler(a.core.Status)) // the HTML page ("/", "/warden/") and its assets
}

// health answers 200 while at least one replica is healthy, once the
// launcher said the start is over: a script that waits on /health (warden
// wait) gets every replica, not the first one loaded.
func (a *Admin) health(w http.ResponseWriter, _ *http.Request) error {
	switch {
	case a.core.Starting():
		return errorf(http.StatusServiceUnavailable, "starting: engines are loading")
	case !a.core.Ready():
		return errorf(http.StatusServiceUnavailable, "no replica is healthy")
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// changes lets loopback callers through, or others with the admin token.
func (a *Admin) changes(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if !a.allowed(r) {
			return errorf(http.StatusForbidden, "admin endpoints need a loopback caller or Authorization: Bearer <admin token>")
		}
		return h(w, r)
	}
}

func (a *Admin) allowed(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && a.token != "" {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(a.token)) == 1
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (a *Admin) policy(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, a.core.Policy())
}

func (a *Admin) setPolicy(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Policy string `json:"policy"`
	}
	if err := decode(r.Body, &in); err != nil {
		return errorf(http.StatusBadRequest, `want a JSON body {"policy": NAME}: %v`, err)
	}
	prev, err := a.core.SetPolicy(in.Policy)
	if err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"policy": in.Policy, "previous": prev})
}

// resetPrefixCache forwards POST /reset_prefix_cache to every replica and
// reports each; 200 only when all succeeded.
func (a *Admin) resetPrefixCache(w http.ResponseWriter, r *http.Request) error {
	res := a.core.ResetPrefixCache(r.Context())
	code := http.StatusOK
	for _, x := range res {
		if x.Error != "" {
			code = http.StatusBadGateway
		}
	}
	return writeJSON(w, code, map[string]any{"replicas": res})
}

func (a *Admin) replicas(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]any{"replicas": a.core.Status().Replicas})
}

// replicaRequest is the body of POST and DELETE /warden/replicas.
type replicaRequest struct {
	URL        string `json:"url"`          // URL[#max_num_seqs=N]
	MaxNumSeqs int    `json:"max_num_seqs"` // POST: overrides the URL's; 0 = ask the server
	Rank       *int   `json:"rank"`         // DELETE: by rank instead of URL
}

// readReplicaRequest takes the request from a JSON body, or from the url and
// rank query parameters.
func readReplicaRequest(r *http.Request) (replicaRequest, error) {
	var in replicaRequest
	if q := r.URL.Query(); q.Has("url") || q.Has("rank") {
		in.URL = q.Get("url")
		if q.Has("rank") {
			n, err := strconv.Atoi(q.Get("rank"))
			if err != nil {
				return in, errorf(http.StatusBadRequest, "rank %q is not an integer", q.Get("rank"))
			}
			in.Rank = &n
		}
		return in, nil
	}
	if err := decode(r.Body, &in); err != nil {
		return in, errorf(http.StatusBadRequest, `want a JSON body {"url": "http://host:port[#max_num_seqs=N]"} or ?url=: %v`, err)
	}
	return in, nil
}

func (a *Admin) addReplica(w http.ResponseWriter, r *http.Request) error {
	in, err := readReplicaRequest(r)
	if err != nil {
		return err
	}
	b, err := router.ParseReplica(in.URL)
	if err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	if in.MaxNumSeqs < 0 {
		return errorf(http.StatusBadRequest, "max_num_seqs must be >= 0 (0: ask the server)")
	}
	if in.MaxNumSeqs > 0 {
		b.MaxNumSeqs = in.MaxNumSeqs
	}
	if a.check != nil {
		if err := a.check(b); err != nil {
			return errorf(http.StatusBadRequest, "%v", err)
		}
	}
	b.Probe, b.FallbackMaxNumSeqs = true, a.core.FallbackMaxNumSeqs()
	info, err := a.core.AddReplica(b)
	switch {
	case errors.Is(err, router.ErrReplicaExists):
		return errorf(http.StatusConflict, "%v", err)
	case err != nil:
		return errorf(http.StatusBadRequest, "%v", err)
	}
	go a.core.CheckReplica(context.WithoutCancel(r.Context()), info.Rank) // in rotation as soon as it answers
	return writeJSON(w, http.StatusCreated, info)
}

func (a *Admin) removeReplica(w http.ResponseWriter, r *http.Request) error {
	in, err := readReplicaRequest(r)
	if err != nil {
		return err
	}
	if in.URL == "" && in.Rank == nil {
		return errorf(http.StatusBadRequest, `name the replica: {"url": ...} or {"rank": N}`)
	}
	rank := -1
	if in.Rank != nil {
		rank = *in.Rank
	}
	info, err := a.core.RemoveReplica(in.URL, rank)
	switch {
	case errors.Is(err, router.ErrUnknownReplica):
		return errorf(http.StatusNotFound, "%v", err)
	case err != nil:
		return errorf(http.StatusBadRequest, "%v", err)
	}
	return writeJSON(w, http.StatusOK, info)
}

// decode reads one small JSON admin body (at most 64 KiB) into v.
func decode(body io.Reader, v any) error {
	return json.NewDecoder(io.LimitReader(body, 64<<10)).Decode(v)
}

// writeJSON answers code with v as indented JSON.
func writeJSON(w http.ResponseWriter, code int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

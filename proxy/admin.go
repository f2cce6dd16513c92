package proxy

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/place"
)

// routes builds the warden's mux: its own endpoints and everything else
// under /v1/ proxied.
func (p *Proxy) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", p.serveHealth)
	mux.HandleFunc("HEAD /api/hello", func(w http.ResponseWriter, _ *http.Request) {}) // Claude Code's pre-warm
	mux.HandleFunc("GET /v1/models", p.requireKey(p.serveModels))
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.cfg.Registry, promhttp.HandlerOpts{Registry: p.cfg.Registry}))
	mux.Handle("GET "+panel.StatusPath, panel.JSONHandler(p.Status))
	mux.HandleFunc("GET /warden/policy", p.servePolicy)
	mux.HandleFunc("POST /warden/policy", p.admin(p.setPolicy))
	mux.HandleFunc("POST /warden/reset_prefix_cache", p.admin(p.resetPrefixCache))
	p.dynamicRoutes(mux) // /warden/replicas
	mux.HandleFunc("/v1/", p.requireKey(p.serveProxied))
	mux.Handle(panel.PagePath, panel.PageHandler(p.Status)) // the HTML page ("/", "/warden/") and its assets
	return mux
}

// serveHealth answers 200 while at least one replica is healthy, once the
// launcher said the start is over (SetStarting): a script that waits on
// /health (warden wait) gets every replica, not the first one loaded.
func (p *Proxy) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if p.starting.Load() {
		writeError(w, http.StatusServiceUnavailable, "starting: engines are loading")
		return
	}
	for _, r := range p.replicaList() {
		if r.healthy() {
			w.WriteHeader(http.StatusOK)
			return
		}
	}
	writeError(w, http.StatusServiceUnavailable, "no replica is healthy")
}

// serveModels answers with what the engines say of their model (vLLM's
// entry carries max_model_len, root and parent; some clients size their
// context from max_model_len), the id set to the served name. Without a
// healthy replica to ask it answers with the name alone; with no served
// name configured it passes the request to a replica.
func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	if p.cfg.ServedModel == "" {
		p.serveProxied(w, r)
		return
	}
	if body, ok := p.engineModels(r); ok {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": p.cfg.ServedModel, "object": "model", "created": p.since.Unix(), "owned_by": "warden",
	}}})
}

// maxModelsBody bounds an engine's /v1/models answer.
const maxModelsBody = 1 << 20

// engineModels is a healthy replica's GET /v1/models with its model's id
// set to the served name; an engine that serves one model under several
// names, or adapters beside it, keeps its other entries.
func (p *Proxy) engineModels(r *http.Request) ([]byte, bool) {
	for _, rep := range p.replicaList() {
		if !rep.healthy() {
			continue
		}
		var body []byte
		err := p.getOK(r.Context(), rep.target.String()+"/v1/models", func(rd io.Reader) error {
			var err error
			body, err = io.ReadAll(io.LimitReader(rd, maxModelsBody))
			return err
		})
		data := gjson.GetBytes(body, "data")
		if err != nil || !data.IsArray() || len(data.Array()) == 0 {
			continue
		}
		at := 0
		for i, m := range data.Array() {
			if m.Get("id").Str == p.cfg.ServedModel {
				return body, true
			}
			if m.Get("parent").Type == gjson.Null || !m.Get("parent").Exists() {
				at = i // the base model, not an adapter
				break
			}
		}
		out, err := sjson.SetBytes(body, fmt.Sprintf("data.%d.id", at), p.cfg.ServedModel)
		if err != nil {
			continue
		}
		// Ranks that fit different contexts: the smallest holds anywhere.
		if least := p.smallestContext(); least > 0 && data.Array()[at].Get("max_model_len").Int() > int64(least) {
			if o, err := sjson.SetBytes(out, fmt.Sprintf("data.%d.max_model_len", at), least); err == nil {
				out = o
			}
		}
		return out, true
	}
	return nil, false
}

// smallestContext is the smallest max_model_len the healthy replicas serve.
func (p *Proxy) smallestContext() int {
	n := 0
	for _, r := range p.replicaList() {
		if v := int(r.maxModelLen.Load()); r.healthy() && v > 0 && (n == 0 || v < n) {
			n = v
		}
	}
	return n
}

// admin allows loopback callers, or others with the admin bearer token.
func (p *Proxy) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !p.isAdmin(r) {
			writeError(w, http.StatusForbidden, "admin endpoints need a loopback caller or Authorization: Bearer <admin token>")
			return
		}
		h(w, r)
	}
}

func (p *Proxy) isAdmin(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && p.cfg.AdminToken != "" {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(p.cfg.AdminToken)) == 1
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (p *Proxy) servePolicy(w http.ResponseWriter, _ *http.Request) {
	pol := p.placer.Config().Policy
	writeJSON(w, http.StatusOK, map[string]any{"policy": pol, "policies": place.Policies(),
		"spill_threshold": p.cfg.SpillThreshold, "spill_threshold_auto": p.cfg.SpillThreshold == 0,
		"admit_wait_s": p.cfg.AdmitWait.Seconds(), "admit_wait_auto": p.cfg.AdmitWait == 0,
		"move_cooldown_turns": p.cfg.cooldown(), "kv_fill": p.cfg.fill()})
}

// SetPolicy switches the placement policy at run time; the session table is
// kept.
func (p *Proxy) SetPolicy(name string) (previous string, err error) {
	if err := place.ValidPolicy(name); err != nil {
		return "", err
	}
	previous = p.placer.SetPolicy(name)
	if previous != name {
		p.log.Info("policy switched", "policy", name, "previous", previous)
	}
	return previous, nil
}

func (p *Proxy) setPolicy(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Policy string `json:"policy"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, `want a JSON body {"policy": NAME}: `+err.Error())
		return
	}
	prev, err := p.SetPolicy(in.Policy)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"policy": in.Policy, "previous": prev})
}

// resetResult is one replica's answer to POST /reset_prefix_cache.
type resetResult struct {
	Rank   int    `json:"rank"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// resetPrefixCache forwards POST /reset_prefix_cache to every replica and
// reports each; 200 only when all succeeded.
func (p *Proxy) resetPrefixCache(w http.ResponseWriter, r *http.Request) {
	reps := p.replicaList()
	res := make([]resetResult, len(reps))
	var wg sync.WaitGroup
	for i, rep := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = p.resetOne(r, rep)
		}()
	}
	wg.Wait()
	code := http.StatusOK
	for _, x := range res {
		if x.Error != "" {
			code = http.StatusBadGateway
		}
	}
	writeJSON(w, code, map[string]any{"replicas": res})
}

func (p *Proxy) resetOne(r *http.Request, rep *replica) resetResult {
	out := resetResult{Rank: rep.rank}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, rep.target.String()+"/reset_prefix_cache", nil)
	if err == nil {
		var resp *http.Response
		if resp, err = p.client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			out.Status = resp.StatusCode
			switch {
			case resp.StatusCode == http.StatusNotFound:
				err = errors.New("the engine has no /reset_prefix_cache: vLLM serves it only in dev mode " +
					"(start the warden with VLLM_SERVER_DEV_MODE=1 in its environment; its engines inherit it)")
			case resp.StatusCode/100 != 2:
				err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
			}
		}
	}
	if err != nil {
		out.Error = err.Error()
		return out
	}
	p.cacheWiped(rep.rank, "POST /reset_prefix_cache")
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

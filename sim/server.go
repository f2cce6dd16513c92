package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lmwarden/warden/kvevents"
	"github.com/lmwarden/warden/sim/model"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/tidwall/gjson"
)

// Version is what /version reports.
const Version = "0.26.0-sim"

// maxBodyBytes caps request bodies (agent conversations reach a few MB).
const maxBodyBytes = 64 << 20

// server is the HTTP face of the simulated engines: one, or one per
// data-parallel rank (--data-parallel-size).
type server struct {
	cfg       Config
	prof      model.Profile
	eng       *model.Engine   // engs[0]
	engs      []*model.Engine // one per data-parallel rank
	bal       *balancer       // vLLM's DP balancer; nil with one engine
	met       *metrics
	log       *slog.Logger
	maxLen    int // effective max_model_len
	kvTokens  int
	numBlocks int
	host      model.HostConfig // the host-RAM KV tier (Blocks 0: off)
	engineID  string
	childPID  int
	lenLines  maxLenLines
	pubs      []*kvevents.Publisher // KV events, one per engine (none without --kv-events-config)

	reqCount atomic.Int64
	hung     atomic.Bool
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /version", s.handleVersion)
	metrics := promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{})
	mux.Handle("GET /metrics", metrics)
	if len(s.engs) == 1 {
		// vLLM's prometheus_client app, mounted at /metrics/, honours
		// name[] (promhttp does too).
		mux.Handle("GET /metrics/", metrics)
	} else {
		// With --data-parallel-size vLLM's multiprocess collector cannot
		// be filtered: /metrics/?name[]=... answers an empty body (measured
		// on vLLM 0.32, CPU build), /metrics everything.
		mux.HandleFunc("GET /metrics/", func(w http.ResponseWriter, r *http.Request) {
			if len(r.URL.Query()["name[]"]) == 0 {
				metrics.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			w.WriteHeader(http.StatusOK)
		})
	}
	if devMode() {
		mux.HandleFunc("POST /reset_prefix_cache", s.handleReset)
	}
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("POST /v1/responses", s.handleResponses)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hung.Load() {
			<-r.Context().Done()
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *server) handleModels(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"` // null: a base model, not an adapter
		MaxModelLen int     `json:"max_model_len"`
	}
	var data []model
	for _, n := range s.cfg.ServedNames {
		data = append(data, model{ID: n, Object: "model", Created: time.Now().Unix(), OwnedBy: "vllm", Root: s.cfg.Model, MaxModelLen: s.maxLen})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *server) handleVersion(w http.ResponseWriter, r *http.Request) {
	snap := s.met.snapshot(0)
	v := map[string]any{
		"version": Version,
		"sim": map[string]any{"profile": s.prof.Name, "time_scale": s.cfg.TimeScale, "kv_tokens": s.kvTokens,
			"tensor_parallel_size": s.prof.TPSize(), "busy_seconds": snap.BusySeconds, "lag_seconds": snap.LagSeconds},
	}
	if n := len(s.engs); n > 1 { // kv_tokens, busy and lag are engine 0's
		v["sim"].(map[string]any)["data_parallel_size"] = n
	}
	if s.host.Blocks > 0 {
		v["sim"].(map[string]any)["kv_offload_tokens"] = s.host.Blocks * s.cfg.BlockSize
		v["sim"].(map[string]any)["kv_offload_tokens_used"] = snap.Host.Used * s.cfg.BlockSize
	}
	if s.childPID != 0 {
		v["child_pid"] = s.childPID
	}
	writeJSON(w, http.StatusOK, v)
}

// devMode reports VLLM_SERVER_DEV_MODE, which vLLM reads as an integer
// and without which it serves none of its dev endpoints (/reset_prefix_cache
// among them; entrypoints/launchers/api_server/routers.py, 0.32.0).
func devMode() bool {
	n, _ := strconv.Atoi(os.Getenv("VLLM_SERVER_DEV_MODE"))
	return n != 0
}

// handleReset drops cached-but-free blocks; like vLLM it refuses while any
// block is held by a request. With ?reset_external=true it also empties
// the host-RAM KV tier (vLLM's reset_connector; entrypoints/serve/dev/cache/
// api_router.py), here only when the GPU reset succeeds. With data
// parallelism every engine is reset, as vLLM calls it on all.
func (s *server) handleReset(w http.ResponseWriter, r *http.Request) {
	ok := true
	external := strings.EqualFold(r.URL.Query().Get("reset_external"), "true")
	for _, eng := range s.engs {
		if err := eng.Do(func(sc *model.Scheduler) {
			if reset := sc.Pool().Reset(); !reset {
				ok = false
			} else if external {
				sc.ResetHost()
			}
		}); err != nil {
			openAIError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	if !ok {
		openAIError(w, http.StatusConflict, "Failed to reset prefix cache because some blocks are not freed yet")
		return
	}
	s.log.Info("prefix cache reset")
	w.WriteHeader(http.StatusOK)
}

// readBody reads and validates a JSON body; on failure it has answered.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, anthropic bool) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err == nil && !json.Valid(body) {
		err = errors.New("invalid JSON body")
	}
	if err != nil {
		msg := fmt.Sprintf("malformed request: %v", err)
		if anthropic {
			anthropicError(w, http.StatusBadRequest, msg)
		} else {
			openAIError(w, http.StatusBadRequest, msg)
		}
		return nil, false
	}
	return body, true
}

// checkModel answers 404 like vLLM for a model it does not serve. An
// absent model field is accepted.
func (s *server) checkModel(name string) error {
	if name == "" {
		return nil
	}
	for _, n := range s.cfg.ServedNames {
		if n == name {
			return nil
		}
	}
	return fmt.Errorf("The model `%s` does not exist. Valid aliases: %s.", name, strings.Join(s.cfg.ServedNames, ", "))
}

// faultGate applies the fault flags to a generation request. It returns
// whether to go on and whether this request must kill the process
// mid-stream.
func (s *server) faultGate(w http.ResponseWriter, r *http.Request) (proceed, die bool) {
	n := s.reqCount.Add(1)
	if s.cfg.HangAfter >= 0 && n > int64(s.cfg.HangAfter) {
		s.hung.Store(true)
		s.log.Warn("fault: hanging", "request", n)
		<-r.Context().Done()
		return false, false
	}
	if s.cfg.HTTPError != 0 {
		openAIError(w, s.cfg.HTTPError, "simulated failure (--sim-http-error)")
		return false, false
	}
	return true, s.cfg.DieAfter > 0 && n == int64(s.cfg.DieAfter)
}

// answerModel is the model name a response carries: the one requested (it
// passed checkModel), else the first served name.
func (s *server) answerModel(body gjson.Result) string {
	if m := body.Get("model").String(); m != "" {
		return m
	}
	return s.cfg.ServedNames[0]
}

// dieNow ends the process abruptly (fault --sim-die-after).
func (s *server) dieNow() {
	s.log.Error("fault: exiting abruptly (--sim-die-after)")
	os.Exit(1)
}

// genPlan is a validated generation request.
type genPlan struct {
	prompt     []uint32
	maxTokens  int
	stopReason string
	limit      int // the most tokens the request may generate (max tokens within the context left)

	// call, when set, is the tool call the request forces: the output is
	// its text (forced, forcedIDs) instead of generated words.
	call      *toolCallOut
	forced    []string
	forcedIDs []uint32

	kv model.SubmitOptions // labels of its KV events (session id, full report)

	rank   int  // the engine (data-parallel rank) it runs on
	placed bool // place chose rank (and counted it with the balancer)
}

// plan checks the prompt length and resolves how many tokens to generate,
// as vLLM would with a model that stops: the limit is the request's max
// tokens (absent: the context left, vLLM's default), clamped to the context
// left; within it the answer has the length drawOutputTokens gives it
// (finish reason "stop"), or reaches the limit ("length"). ignore_eos
// (vLLM's sampling parameter) generates the whole limit; --sim-output-tokens
// N replaces the draw by N.
//
// The checks and their texts are vLLM 0.32.0's (vllm/renderers/params.py):
// an output limit above max_model_len is refused, naming the parameter as
// the endpoint calls it (param: max_tokens for chat and completions,
// max_completion_tokens for Messages, max_output_tokens for Responses); a
// smaller one is clamped to the context the prompt leaves.
func (s *server) plan(prompt []uint32, maxTok gjson.Result, param string, ignoreEOS bool) (genPlan, error) {
	if len(prompt) == 0 {
		return genPlan{}, errors.New("The prompt is empty.")
	}
	if len(prompt) >= s.maxLen {
		return genPlan{}, fmt.Errorf("This model's maximum context length is %d tokens. However, your prompt contains %d input tokens, "+
			"which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.", s.maxLen, len(prompt))
	}
	limit := s.maxLen - len(prompt)
	if maxTok.Exists() && maxTok.Type != gjson.Null {
		if maxTok.Type != gjson.Number || maxTok.Int() < 1 {
			return genPlan{}, fmt.Errorf("max_tokens must be an integer of at least 1, got %s", maxTok.Raw)
		}
		if maxTok.Int() > int64(s.maxLen) {
			return genPlan{}, fmt.Errorf("%s=%d cannot be greater than max_model_len=%d. Please request fewer output tokens.",
				param, maxTok.Int(), s.maxLen)
		}
		limit = min(limit, int(maxTok.Int()))
	}
	p := genPlan{prompt: prompt, maxTokens: limit, stopReason: "length", limit: limit}
	if ignoreEOS {
		return p, nil
	}
	n := s.cfg.OutputTokens
	if n == 0 {
		n = model.DrawOutputTokens(s.cfg.Seed, prompt)
	}
	if n < limit {
		p.maxTokens, p.stopReason = n, "stop"
	}
	return p, nil
}

// run submits p and calls emit with each batch of generated text (final is
// true on the last). If the client goes away the request is aborted.
func (s *server) run(ctx context.Context, p genPlan, die bool, emit func(text string, final bool) error) (*model.Request, error) {
	eng := s.engs[p.rank]
	if s.bal != nil && p.placed {
		defer s.bal.done(p.rank)
	}
	req, err := eng.SubmitWith(p.prompt, p.maxTokens, p.stopReason, p.forcedIDs, p.forced, p.kv)
	if err != nil {
		return nil, err
	}
	first := true
	for {
		texts, fin, err := req.Take(ctx)
		if err != nil {
			eng.Cancel(req)
			return req, err
		}
		if err := emit(strings.Join(texts, ""), fin); err != nil {
			eng.Cancel(req)
			return req, err
		}
		if first && die {
			s.dieNow()
		}
		first = false
		if fin {
			return req, nil
		}
	}
}

// usage is what a finished request reports.
// usage is one request's token counts as vLLM reports them. created is
// vLLM's num_cache_creation_tokens: the prompt tokens this request computed
// and wrote to the prefix cache (its full prompt blocks less the hits).
type usage struct {
	prompt, completion, cached, created int
}

func (s *server) usageOf(req *model.Request) usage {
	q := req.Seq()
	u := usage{prompt: q.NumPrompt, completion: q.Output, cached: max(q.CachedTokens, 0)}
	if bs := s.cfg.BlockSize; bs > 0 {
		u.created = max(u.prompt/bs*bs-u.cached, 0)
	}
	return u
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// errorType is the class vLLM names an HTTP error by.
func errorType(code int) string {
	return map[int]string{400: "BadRequestError", 404: "NotFoundError", 409: "ConflictError", 500: "InternalServerError", 503: "ServiceUnavailableError"}[code]
}

// openAIError is vLLM 0.32's error body, byte for byte:
// {"error":{"message":...,"type":"BadRequestError","param":null,"code":400}}.
func openAIError(w http.ResponseWriter, code int, msg string) {
	typ := errorType(code)
	if typ == "" {
		typ = http.StatusText(code)
	}
	type detail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	writeError(w, code, struct {
		Error detail `json:"error"`
	}{detail{msg, typ, nil, code}})
}

// anthropicError is vLLM 0.32's Messages error, byte for byte: the OpenAI
// error class as the type ({"type":"error","error":{"type":"BadRequestError","message":...}}).
func anthropicError(w http.ResponseWriter, code int, msg string) {
	type detail struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	writeError(w, code, struct {
		Type  string `json:"type"`
		Error detail `json:"error"`
	}{"error", detail{errorType(code), msg}})
}

// writeError writes an error body as vLLM's JSONResponse does: compact, no
// trailing newline, non-ASCII unescaped.
func writeError(w http.ResponseWriter, code int, v any) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, strings.TrimSuffix(b.String(), "\n"))
}

func newID(prefix string) string {
	return prefix + strconv.FormatUint(rand.Uint64(), 16) + strconv.FormatUint(rand.Uint64(), 16)
}

// sseWriter writes server-sent events and flushes each.
type sseWriter struct {
	w http.ResponseWriter
	c *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, c: http.NewResponseController(w)}
}

// event writes one event; name "" writes a data-only event. v is JSON
// encoded unless it is a string.
func (s *sseWriter) event(name string, v any) error {
	data, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		data = string(b)
	}
	var err error
	if name != "" {
		_, err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, data)
	} else {
		_, err = fmt.Fprintf(s.w, "data: %s\n\n", data)
	}
	if err != nil {
		return err
	}
	return s.c.Flush()
}

var errBadPrompt = errors.New("prompt must be a string, a one-element array of strings, or an array of token ids")

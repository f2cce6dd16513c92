package bench

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router/schema"
)

// fakeServer speaks just enough Anthropic and OpenAI SSE, vLLM /metrics and
// (with warden=true) the warden's admin endpoints for the bench's tests. Its
// "prefix cache" counts, per request, the longest common character prefix
// with any earlier prompt, at 4 characters per token. Conversations are
// told apart by session id and x-claude-code-agent-id (subagents share their
// parent's session id).
type fakeServer struct {
	t       *testing.T
	warden  bool
	tokens  int           // output tokens per reply
	between time.Duration // delay between streamed tokens
	token   string        // when set, admin POSTs need "Authorization: Bearer <token>"
	tag     bool          // make every reply unique: its pieces name the request

	mu        sync.Mutex
	reqs      []fakeReq
	prompts   []string
	last      map[string]string // session id + "/" + agent id -> previous prompt + reply
	broken    int               // follow-ups that did not extend the previous turn exactly
	running   int
	hits      float64
	queries   float64
	sent      int // output tokens sent in finished replies
	policy    string
	policySet []string
	resets    int
	n         int
}

type fakeReq struct {
	Path, Query string
	Header      http.Header
	Body        []byte
	At, Done    time.Time // arrival; reply booked (just before the final event)
	Reply       string
}

func newFake(t *testing.T, warden bool) (*fakeServer, *httptest.Server) {
	f := &fakeServer{t: t, warden: warden, tokens: 6, between: time.Millisecond, last: map[string]string{}, policy: "sticky"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { f.complete(w, r, APIAnthropic) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { f.complete(w, r, APIOpenAI) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	mux.HandleFunc("GET /metrics", f.metrics)
	mux.HandleFunc("POST /v1/messages/count_tokens", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, `{"input_tokens":%d}`, len(flatten(body))/4)
	})
	if warden {
		mux.HandleFunc("GET /warden/status", f.status)
		mux.HandleFunc("POST /warden/policy", f.setPolicy)
		mux.HandleFunc("POST /warden/reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.resets++
			f.mu.Unlock()
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

// flatten joins the system prompt and every message's text.
func flatten(body []byte) string {
	var b strings.Builder
	text := func(v gjson.Result) {
		if v.IsArray() {
			v.ForEach(func(_, blk gjson.Result) bool { b.WriteString(blk.Get("text").String()); return true })
		} else {
			b.WriteString(v.String())
		}
		b.WriteByte('\n')
	}
	text(gjson.GetBytes(body, "system"))
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		b.WriteString(m.Get("role").String() + ":")
		text(m.Get("content"))
		return true
	})
	return b.String()
}

func sessionOf(r *http.Request, api API) string {
	if api == APIOpenAI {
		return r.Header.Get("session-id")
	}
	return r.Header.Get("X-Claude-Code-Session-Id")
}

// admit records a request and updates the fake prefix counters; idx is
// the request's index in f.reqs.
func (f *fakeServer) admit(r *http.Request, body []byte, sid, prompt string) (replica, idx int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	idx = len(f.reqs)
	f.reqs = append(f.reqs, fakeReq{Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body, At: time.Now()})
	best := 0
	for _, p := range f.prompts {
		n := 0
		for n < len(p) && n < len(prompt) && p[n] == prompt[n] {
			n++
		}
		best = max(best, n)
	}
	if prev, ok := f.last[convKey(r, sid)]; ok && !strings.HasPrefix(prompt, prev) {
		f.broken++
	}
	f.prompts = append(f.prompts, prompt)
	f.hits += float64(best / 4)
	f.queries += float64(len(prompt) / 4)
	f.running++
	f.n++
	if f.policy == "sticky" {
		h := fnv.New32a()
		h.Write([]byte(sid))
		return int(h.Sum32() % 2), idx
	}
	return f.n % 2, idx
}

// convKey names one conversation: a session's own, or one of its subagents'.
func convKey(r *http.Request, sid string) string { return sid + "/" + r.Header.Get(AgentHeader) }

func (f *fakeServer) complete(w http.ResponseWriter, r *http.Request, api API) {
	full, err := io.ReadAll(r.Body)
	if err != nil || !gjson.ValidBytes(full) {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	sid := sessionOf(r, api)
	prompt := flatten(full)
	replica, idx := f.admit(r, full, sid, prompt)
	defer func() { f.mu.Lock(); f.running--; f.mu.Unlock() }()
	if f.warden {
		w.Header().Set(ReplicaHeader, fmt.Sprint(replica))
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(s string) { fmt.Fprintf(w, "data: %s\n\n", s); fl.Flush() }
	promptTokens := len(prompt) / 4
	if api == APIAnthropic {
		fmt.Fprintf(w, "event: message_start\n")
		send(fmt.Sprintf(`{"type":"message_start","message":{"usage":{"input_tokens":%d,"output_tokens":0}}}`, promptTokens))
	} else {
		send(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}`)
	}
	var reply strings.Builder
	for i := 0; i < f.tokens; i++ {
		time.Sleep(f.between)
		piece := fmt.Sprintf("w%d ", i)
		if f.tag {
			piece = fmt.Sprintf("r%d.w%d ", idx, i)
		}
		reply.WriteString(piece)
		if api == APIAnthropic {
			send(fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, piece))
		} else {
			send(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":%q}}],"usage":null}`, piece))
		}
	}
	// Book the reply before the final event: the client may read the
	// counters or send its next turn as soon as it has it.
	f.mu.Lock()
	f.sent += f.tokens
	f.last[convKey(r, sid)] = prompt + "assistant:" + reply.String()
	f.reqs[idx].Done, f.reqs[idx].Reply = time.Now(), reply.String()
	f.mu.Unlock()
	if api == APIAnthropic {
		send(fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":%d}}`, f.tokens))
		send(`{"type":"message_stop"}`)
	} else {
		send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, promptTokens, f.tokens))
		send(`[DONE]`)
	}
}

func (f *fakeServer) metrics(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"fake-model\",engine=\"0\"} %d\n", f.running)
	fmt.Fprintf(w, "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{model_name=\"fake-model\",engine=\"0\"} %g\n", f.queries)
	fmt.Fprintf(w, "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{model_name=\"fake-model\",engine=\"0\"} %g\n", f.hits)
}

func (f *fakeServer) status(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	st := schema.Status{Policy: f.policy, Affinity: f.policy != "off", Replicas: []schema.Replica{
		{Rank: 0, Running: float64(f.running), PrefixHits: f.hits, PrefixQueries: f.queries},
		{Rank: 1},
	}}
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(st)
}

func (f *fakeServer) setPolicy(w http.ResponseWriter, r *http.Request) {
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		http.Error(w, "admin endpoints need a token", http.StatusForbidden)
		return
	}
	var req struct{ Policy string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Policy == "" {
		http.Error(w, "bad policy", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.policy = req.Policy
	f.policySet = append(f.policySet, req.Policy)
	f.mu.Unlock()
}

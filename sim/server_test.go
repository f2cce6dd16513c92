package sim_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/internal/usage"
)

const fast = "1000" // --sim-time-scale for tests that do not watch timing

// chatBody is a chat request that generates exactly maxTokens (ignore_eos,
// as the bench sends): tests of the cache and the scheduler need known lengths.
func chatBody(msgs []map[string]any, maxTokens int) map[string]any {
	return map[string]any{"model": "test-model", "messages": msgs, "max_tokens": maxTokens, "ignore_eos": true}
}

func TestSecondTurnHitsCacheOnSameInstanceOnly(t *testing.T) {
	a := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details")
	b := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details")
	turn1 := []map[string]any{msg("system", words("sys", 800)), msg("user", words("task", 1200))}
	const gen = 40
	code, r1 := post(t, a.URL+"/v1/chat/completions", chatBody(turn1, gen))
	if code != 200 {
		t.Fatalf("turn 1: %d %s", code, r1.Raw)
	}
	p1 := int(r1.Get("usage.prompt_tokens").Int())
	if got := r1.Get("usage.completion_tokens").Int(); got != gen {
		t.Errorf("completion_tokens = %d, want %d", got, gen)
	}
	// vLLM 0.32: details present with cached_tokens 0, and the full prompt
	// blocks it wrote to the cache.
	if d := r1.Get("usage.prompt_tokens_details"); d.Get("cached_tokens").Int() != 0 || !d.Get("cached_tokens").Exists() ||
		d.Get("created_cache_tokens").Int() != int64(p1/16*16) {
		t.Errorf("cold request reports prompt_tokens_details %s, want cached_tokens 0 and created_cache_tokens %d", d.Raw, p1/16*16)
	}
	turn2 := append(turn1, msg("assistant", r1.Get("choices.0.message.content").String()), msg("user", words("more", 400)))
	_, r2 := post(t, a.URL+"/v1/chat/completions", chatBody(turn2, gen))
	// prompt + output of turn 1 minus the never-computed last token, block-rounded
	want := (p1 + gen - 1) / 16 * 16
	if got := int(r2.Get("usage.prompt_tokens_details.cached_tokens").Int()); got != want {
		t.Errorf("turn 2 on the same instance: cached_tokens = %d, want %d (prompt %d + output %d)", got, want, p1, gen)
	}
	_, r3 := post(t, b.URL+"/v1/chat/completions", chatBody(turn2, gen))
	if d := r3.Get("usage.prompt_tokens_details"); d.Get("cached_tokens").Int() != 0 {
		t.Errorf("turn 2 on another instance reports %s, want no cached tokens", d.Raw)
	}
}

func TestEvictionUnderPressureLowersHits(t *testing.T) {
	// 2048 tokens of KV; each conversation is about 600 tokens.
	p := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details", "--sim-kv-tokens", "2048")
	convo := func(i int) []map[string]any {
		return []map[string]any{msg("user", words("conversation"+string(rune('a'+i)), 600))}
	}
	cached := func(msgs []map[string]any) int64 {
		_, r := post(t, p.URL+"/v1/chat/completions", chatBody(msgs, 16))
		return r.Get("usage.prompt_tokens_details.cached_tokens").Int()
	}
	cached(convo(0))
	warm := cached(convo(0))
	if warm == 0 {
		t.Fatal("repeat without pressure did not hit the cache")
	}
	for i := 1; i <= 4; i++ { // 4 x 600 tokens > 2048: evicts conversation 0
		cached(convo(i))
	}
	if after := cached(convo(0)); after >= warm {
		t.Errorf("after pressure: cached %d, want fewer than the %d without pressure", after, warm)
	}
	m := p.Metrics(t)
	if m["vllm:prefix_cache_hits_total"] >= m["vllm:prefix_cache_queries_total"]/2 {
		t.Errorf("hits %v of %v queried: pressure should keep the hit rate low", m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"])
	}
}

func TestMetricsAgreeWithUsage(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details")
	base := []map[string]any{msg("user", words("metrics", 300))}
	var prompt, completion, cached int64
	add := func(pt, ct, ca int64) { prompt, completion, cached = prompt+pt, completion+ct, cached+ca }
	for i := 0; i < 3; i++ {
		_, r := post(t, p.URL+"/v1/chat/completions", chatBody(base, 20))
		add(r.Get("usage.prompt_tokens").Int(), r.Get("usage.completion_tokens").Int(), r.Get("usage.prompt_tokens_details.cached_tokens").Int())
	}
	_, r := post(t, p.URL+"/v1/completions", map[string]any{"prompt": words("plain", 100), "max_tokens": 7})
	add(r.Get("usage.prompt_tokens").Int(), r.Get("usage.completion_tokens").Int(), r.Get("usage.prompt_tokens_details.cached_tokens").Int())
	_, r = post(t, p.URL+"/v1/messages", map[string]any{"model": "test-model", "max_tokens": 9, "messages": base})
	a := usage.ParseAnthropic(r.Get("usage"))
	add(int64(a.Prompt), int64(a.Output), int64(a.Cached))
	_, r = post(t, p.URL+"/v1/responses", map[string]any{"model": "test-model", "max_output_tokens": 5, "input": words("resp", 50)})
	add(r.Get("usage.input_tokens").Int(), r.Get("usage.output_tokens").Int(), r.Get("usage.input_tokens_details.cached_tokens").Int())
	if cached == 0 {
		t.Fatal("no request reported cached tokens")
	}
	m := p.Metrics(t)
	got := map[string]float64{
		"prompt": m["vllm:prompt_tokens_total"], "generation": m["vllm:generation_tokens_total"],
		"hits": m["vllm:prefix_cache_hits_total"], "queries": m["vllm:prefix_cache_queries_total"],
		"requests": m["vllm:request_success_total"], "ttft_count": m["vllm:time_to_first_token_seconds_count"],
	}
	want := map[string]float64{
		"prompt": float64(prompt), "generation": float64(completion), "hits": float64(cached), "queries": float64(prompt),
		"requests": 6, "ttft_count": 6,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics vs summed usage (-want +got):\n%s", diff)
	}
	if m["vllm:num_requests_running"] != 0 || m["vllm:kv_cache_usage_perc"] != 0 {
		t.Errorf("idle engine: running %v kv usage %v", m["vllm:num_requests_running"], m["vllm:kv_cache_usage_perc"])
	}
	if m["vllm:cache_config_info"] != 1 {
		t.Errorf("cache_config_info = %v, want 1", m["vllm:cache_config_info"])
	}
}

func TestStreamingSendsFirstTokenWhileRunning(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", "1") // ~24 ms per decode step: 2000 tokens take ~50 s
	body := chatBody([]map[string]any{msg("user", "hello")}, 2000)
	body["stream"] = true
	resp := postRaw(t, p.URL+"/v1/chat/completions", body)
	r := newSSEReader(resp.Body)
	if ev, ok := r.next(); !ok || ev.data.Get("choices.0.delta.role").String() != "assistant" {
		t.Fatalf("first event %q, want the role chunk", ev.raw)
	}
	if ev, ok := r.next(); !ok || ev.data.Get("choices.0.delta.content").String() == "" {
		t.Fatalf("second event %q, want the first token", ev.raw)
	}
	if m := p.Metrics(t); m["vllm:num_requests_running"] != 1 || m["vllm:request_success_total"] != 0 {
		t.Errorf("after the first token: running %v finished %v, want the request still running",
			m["vllm:num_requests_running"], m["vllm:request_success_total"])
	}
	resp.Body.Close() // client goes away: the engine aborts the request
	simproc.Poll(t, "the aborted request to leave the engine", func() bool {
		m := p.Metrics(t)
		return m["vllm:num_requests_running"] == 0 && m["vllm:kv_cache_usage_perc"] == 0
	})
}

func TestOpenAIStreamUsageChunk(t *testing.T) {
	plain := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details")
	forced := simproc.Start(t, "--sim-time-scale", fast, "--enable-force-include-usage")
	tests := []struct {
		name      string
		url       string
		opts      map[string]any
		wantUsage bool
	}{
		{"not asked", plain.URL, nil, false},
		{"include_usage", plain.URL, map[string]any{"include_usage": true}, true},
		{"forced by the server", forced.URL, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := chatBody([]map[string]any{msg("user", "count to ten")}, 6)
			body["stream"] = true
			if tc.opts != nil {
				body["stream_options"] = tc.opts
			}
			evs := readAllEvents(t, postRaw(t, tc.url+"/v1/chat/completions", body))
			if last := evs[len(evs)-1].raw; last != "[DONE]" {
				t.Fatalf("last event %q, want [DONE]", last)
			}
			usage := evs[len(evs)-2].data
			hasUsage := usage.Get("usage").Exists() && len(usage.Get("choices").Array()) == 0 && usage.Get("choices").IsArray()
			if hasUsage != tc.wantUsage {
				t.Fatalf("usage chunk present = %v, want %v (%s)", hasUsage, tc.wantUsage, usage.Raw)
			}
			if tc.wantUsage && usage.Get("usage.completion_tokens").Int() != 6 {
				t.Errorf("usage %s, want 6 completion tokens", usage.Get("usage").Raw)
			}
			var text string
			for _, ev := range evs {
				text += ev.data.Get("choices.0.delta.content").String()
			}
			if n := len(strings.Fields(text)); n != 6 {
				t.Errorf("streamed text %q has %d words, want 6", text, n)
			}
		})
	}
}

func TestStreamIntervalGroupsTokens(t *testing.T) {
	// 12 tokens at --stream-interval 5: flushes after tokens 1, 6, 11 and at
	// the end. A slow reader may merge flushes, so check that every chunk
	// ends on a flush boundary rather than counting chunks exactly.
	p := simproc.Start(t, "--sim-time-scale", "1", "--stream-interval", "5")
	body := chatBody([]map[string]any{msg("user", "go")}, 12)
	body["stream"] = true
	var ends []int
	total := 0
	for _, ev := range readAllEvents(t, postRaw(t, p.URL+"/v1/chat/completions", body)) {
		if c := ev.data.Get("choices.0.delta.content").String(); c != "" {
			total += len(strings.Fields(c))
			ends = append(ends, total)
		}
	}
	if total != 12 || len(ends) > 4 {
		t.Fatalf("chunk ends %v: want 12 tokens in at most 4 chunks", ends)
	}
	for _, e := range ends[:len(ends)-1] {
		if (e-1)%5 != 0 {
			t.Errorf("chunk ends %v: a chunk ended after token %d, not on a flush (1, 6, 11)", ends, e)
		}
	}
}

func TestErrors(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast, "--max-model-len", "1000")
	tests := []struct {
		name, path, body string
		code             int
		field, contains  string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages": [`, 400, "error.message", "malformed"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "error.message", "The model `gpt-9` does not exist."},
		{"messages missing", "/v1/chat/completions", `{"model":"test-model"}`, 400, "error.message", "messages"},
		{"bad max_tokens", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "error.message", "max_tokens"},
		{"prompt too long", "/v1/completions", `{"prompt":"` + words("long", 1500) + `"}`, 400, "error.message", "maximum context length is"},
		{"anthropic malformed", "/v1/messages", `not json`, 400, "error.type", "BadRequestError"},
		{"anthropic unknown model", "/v1/messages?beta=true", `{"model":"x","max_tokens":1,"messages":[]}`, 404, "error.type", "NotFoundError"},
		{"bad completion prompt", "/v1/completions", `{"prompt":{"a":1}}`, 400, "error.message", "prompt must be"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, r := post(t, p.URL+tc.path, tc.body)
			if code != tc.code || !strings.Contains(r.Get(tc.field).String(), tc.contains) {
				t.Errorf("got %d %s, want %d with %s containing %q", code, r.Raw, tc.code, tc.field, tc.contains)
			}
		})
	}
	if resp, err := http.Get(p.URL + "/health"); err != nil || resp.StatusCode != 200 {
		t.Errorf("server unhealthy after bad requests: %v", err)
	}
}

func TestModelsVersionCountTokens(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast, "--served-model-name", "qwen", "--sim-kv-tokens", "40000")
	resp, err := http.Get(p.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, models := get(t, p.URL+"/v1/models")
	if got := models.Get("data.0.id").String(); got != "qwen" {
		t.Errorf("model id %q, want qwen", got)
	}
	_, v := get(t, p.URL+"/version")
	if v.Get("version").String() != "0.26.0-sim" || v.Get("sim.kv_tokens").Int() != 40000 || v.Get("sim.time_scale").Float() != 1000 {
		t.Errorf("/version = %s", v.Raw)
	}
	_, n := post(t, p.URL+"/v1/messages/count_tokens?beta=true", map[string]any{"model": "qwen", "messages": []any{msg("user", words("count", 100))}})
	_, full := post(t, p.URL+"/v1/messages", map[string]any{"model": "qwen", "max_tokens": 1, "messages": []any{msg("user", words("count", 100))}})
	if n.Get("input_tokens").Int() == 0 || n.Get("input_tokens").Int() != full.Get("usage.input_tokens").Int() {
		t.Errorf("count_tokens %s vs messages usage %s", n.Raw, full.Get("usage").Raw)
	}
}

func TestPreemptionUnderKVPressureCompletesEveryRequest(t *testing.T) {
	// 1024 tokens of KV; four requests of ~200 prompt + 300 output tokens
	// cannot all fit: the newest are preempted, recomputed, and still finish.
	p := simproc.Start(t, "--sim-time-scale", fast, "--sim-kv-tokens", "1024")
	done := make(chan int64, 4)
	for i := 0; i < 4; i++ {
		go func() {
			_, r := post(t, p.URL+"/v1/chat/completions", chatBody([]map[string]any{msg("user", words("pressure"+string(rune('a'+i)), 160))}, 300))
			done <- r.Get("usage.completion_tokens").Int()
		}()
	}
	for i := 0; i < 4; i++ {
		if got := <-done; got != 300 {
			t.Errorf("a request finished with %d tokens, want 300", got)
		}
	}
	m := p.Metrics(t)
	if m["vllm:num_preemptions_total"] == 0 {
		t.Error("no preemptions under KV pressure")
	}
	if m["vllm:generation_tokens_total"] != 1200 || m["vllm:kv_cache_usage_perc"] != 0 {
		t.Errorf("generation tokens %v (want 1200), kv usage %v (want 0)", m["vllm:generation_tokens_total"], m["vllm:kv_cache_usage_perc"])
	}
}

// Answers end like a model's: a length drawn from agent turns, the same for
// one prompt on every replica, "stop" within the limit; ignore_eos fills it.
func TestAnswersStopOnTheirOwn(t *testing.T) {
	a := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details")
	b := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details")
	turn := []map[string]any{msg("user", "Summarise what a prefix cache is in one line.")}
	body := map[string]any{"model": "test-model", "messages": turn, "max_tokens": 32000}
	_, ra := post(t, a.URL+"/v1/chat/completions", body)
	_, rb := post(t, b.URL+"/v1/chat/completions", body)
	n := ra.Get("usage.completion_tokens").Int()
	if ra.Get("choices.0.finish_reason").Str != "stop" || n < 1 || n >= 32000 || rb.Get("usage.completion_tokens").Int() != n {
		t.Errorf("max_tokens 32000: %d tokens (%s) on one replica, %d on the other; want one drawn length, stop",
			n, ra.Get("choices.0.finish_reason").Str, rb.Get("usage.completion_tokens").Int())
	}
	body["max_tokens"] = n - 1
	if _, r := post(t, a.URL+"/v1/chat/completions", body); r.Get("choices.0.finish_reason").Str != "length" || r.Get("usage.completion_tokens").Int() != n-1 {
		t.Errorf("max_tokens below the drawn length: %s", r.Get("usage").Raw)
	}
	msgBody := map[string]any{"model": "test-model", "messages": turn, "max_tokens": 32000}
	if _, r := post(t, a.URL+"/v1/messages", msgBody); r.Get("stop_reason").Str != "end_turn" || r.Get("usage.output_tokens").Int() != n {
		t.Errorf("Messages: %s %s, want end_turn after the same %d tokens", r.Get("stop_reason").Str, r.Get("usage").Raw, n)
	}
	msgBody["ignore_eos"], msgBody["max_tokens"] = true, 300
	if _, r := post(t, a.URL+"/v1/messages", msgBody); r.Get("stop_reason").Str != "max_tokens" || r.Get("usage.output_tokens").Int() != 300 {
		t.Errorf("Messages with ignore_eos: %s %s, want max_tokens after 300", r.Get("stop_reason").Str, r.Get("usage").Raw)
	}
}

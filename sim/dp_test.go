package sim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/promtext"
	"github.com/lmwarden/warden/internal/simproc"
)

// postRank sends body with X-data-parallel-rank: rank (no header when rank
// is ""), the header's name in the case given.
func postRank(t *testing.T, url, header, rank string, body any) (int, []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if rank != "" {
		req.Header[header] = []string{rank} // as written, not canonicalised
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, b
}

// perEngine is family's samples summed per engine label, from GET path.
func perEngine(t *testing.T, url, family string) map[string]float64 {
	t.Helper()
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	fams, err := promtext.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := fams.SumBy(family, "engine")
	if !ok {
		t.Fatalf("/metrics has no %s", family)
	}
	return m
}

// endpointBodies are one request per generation endpoint, each prompt its
// own (seed), answering 4 tokens.
func endpointBody(path, seed string) map[string]any {
	text := words(seed, 200)
	switch path {
	case "/v1/chat/completions":
		return chatBody([]map[string]any{msg("user", text)}, 4)
	case "/v1/completions":
		return map[string]any{"model": "test-model", "prompt": text, "max_tokens": 4, "ignore_eos": true}
	case "/v1/messages":
		return map[string]any{"model": "test-model", "max_tokens": 4, "ignore_eos": true, "messages": []any{msg("user", text)}}
	}
	return map[string]any{"model": "test-model", "max_output_tokens": 4, "ignore_eos": true, "input": text}
}

// TestDPRankHeaderPerEndpoint: with --data-parallel-size 2, chat
// completions, completions and Messages run on the engine the
// X-data-parallel-rank header names (in any case): only its prompt counter
// rises. Responses ignore the header, as vLLM 0.32's do (measured: four
// rank-1 requests went 1,0,1,0): sequential requests alternate engines.
func TestDPRankHeaderPerEndpoint(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast, "--data-parallel-size", "2")
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/messages"} {
		for _, rank := range []string{"1", "0"} {
			before := perEngine(t, p.URL, "vllm:prompt_tokens_total")
			for i, header := range []string{"X-data-parallel-rank", "x-data-parallel-rank", "X-DATA-PARALLEL-RANK"} {
				code, b := postRank(t, p.URL+path, header, rank, endpointBody(path, path+rank+header+string(rune('a'+i))))
				if code != http.StatusOK {
					t.Fatalf("%s with %s: %s: %d %s", path, header, rank, code, b)
				}
			}
			after := perEngine(t, p.URL, "vllm:prompt_tokens_total")
			other := map[string]string{"0": "1", "1": "0"}[rank]
			if after[rank] <= before[rank] || after[other] != before[other] {
				t.Errorf("%s pinned to rank %s: prompt tokens per engine %v -> %v, want only engine %s to rise", path, rank, before, after, rank)
			}
		}
	}
	before := perEngine(t, p.URL, "vllm:request_success_total")
	for i := range 4 {
		if code, b := postRank(t, p.URL+"/v1/responses", "X-data-parallel-rank", "1", endpointBody("/v1/responses", "resp"+string(rune('a'+i)))); code != http.StatusOK {
			t.Fatalf("responses: %d %s", code, b)
		}
	}
	after := perEngine(t, p.URL, "vllm:request_success_total")
	if got := map[string]float64{"0": after["0"] - before["0"], "1": after["1"] - before["1"]}; got["0"] != 2 || got["1"] != 2 {
		t.Errorf("four responses with rank 1, one after another, served per engine %v, want 2 and 2 (the header ignored, the balancer's rotation)", got)
	}
}

// TestDPUnpinnedTurnsAlternate: without the header vLLM's balancer
// rotates on ties, so at low load a conversation's second turn lands on
// the other engine and finds nothing cached; pinned, it hits.
func TestDPUnpinnedTurnsAlternate(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast, "--data-parallel-size", "2", "--enable-prompt-tokens-details")
	turns := func(rank string) (second gjson.Result) {
		t1 := []map[string]any{msg("user", words("task"+rank, 600))}
		code, b := postRank(t, p.URL+"/v1/chat/completions", "X-data-parallel-rank", rank, chatBody(t1, 8))
		if code != http.StatusOK {
			t.Fatalf("turn 1: %d %s", code, b)
		}
		t2 := append(t1, msg("assistant", gjson.GetBytes(b, "choices.0.message.content").String()), msg("user", words("more", 100)))
		code, b = postRank(t, p.URL+"/v1/chat/completions", "X-data-parallel-rank", rank, chatBody(t2, 8))
		if code != http.StatusOK {
			t.Fatalf("turn 2: %d %s", code, b)
		}
		return gjson.GetBytes(b, "usage.prompt_tokens_details.cached_tokens")
	}
	if got := turns("").Int(); got != 0 {
		t.Errorf("unpinned second turn cached %d tokens, want 0 (the balancer's tie rotation sends it to the other engine)", got)
	}
	if got := turns("1").Int(); got < 600 {
		t.Errorf("second turn pinned to rank 1 cached %d tokens, want the first turn's prompt (over 600)", got)
	}
	served := perEngine(t, p.URL, "vllm:request_success_total")
	if served["0"] != 1 || served["1"] != 3 {
		t.Errorf("requests per engine %v, want 1 on engine 0 and 3 on engine 1 (two unpinned turns alternating, two pinned to 1)", served)
	}
}

// TestDPSpreadsConcurrentRequests: unpinned requests in flight together
// spread over the engines (the in-flight floor of the score).
func TestDPSpreadsConcurrentRequests(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", "50", "--data-parallel-size", "3")
	const n = 9
	errs := make(chan string, n)
	for i := range n {
		go func() {
			code, b := postRank(t, p.URL+"/v1/chat/completions", "", "", chatBody([]map[string]any{msg("user", words("spread"+string(rune('a'+i)), 300))}, 32))
			if code != http.StatusOK {
				errs <- string(b)
				return
			}
			errs <- ""
		}()
	}
	for range n {
		if e := <-errs; e != "" {
			t.Fatalf("request failed: %s", e)
		}
	}
	served := perEngine(t, p.URL, "vllm:request_success_total")
	for _, e := range []string{"0", "1", "2"} {
		if served[e] == 0 {
			t.Errorf("requests per engine %v: engine %s served none of %d concurrent unpinned requests", served, e, n)
		}
	}
}

// TestDPRankOutOfRange: vLLM 0.32 refuses a rank outside [0, N) as a
// validation error, whatever N: 400 for a whole answer, a 200 stream with
// the error for a streamed one. A value that is not an integer is no rank.
func TestDPRankOutOfRange(t *testing.T) {
	p := simproc.Start(t, "--sim-time-scale", fast, "-dp", "2")
	const want = "data_parallel_rank 2 is out of range [0, 2)."
	chat := endpointBody("/v1/chat/completions", "range")
	code, b := postRank(t, p.URL+"/v1/chat/completions", "X-data-parallel-rank", "2", chat)
	if code != http.StatusBadRequest || gjson.GetBytes(b, "error.message").String() != want || gjson.GetBytes(b, "error.type").String() != "BadRequestError" {
		t.Errorf("chat, rank 2 of 2: %d %s, want 400 BadRequestError %q", code, b, want)
	}
	code, b = postRank(t, p.URL+"/v1/completions", "X-data-parallel-rank", "-1", endpointBody("/v1/completions", "range"))
	if code != http.StatusBadRequest || !strings.Contains(string(b), "data_parallel_rank -1 is out of range [0, 2).") {
		t.Errorf("completions, rank -1: %d %s, want 400", code, b)
	}
	code, b = postRank(t, p.URL+"/v1/messages", "X-data-parallel-rank", "7", endpointBody("/v1/messages", "range"))
	if code != http.StatusBadRequest || gjson.GetBytes(b, "type").String() != "error" || !strings.Contains(gjson.GetBytes(b, "error.message").String(), "out of range") {
		t.Errorf("messages, rank 7: %d %s, want an Anthropic 400", code, b)
	}
	chat["stream"] = true
	code, b = postRank(t, p.URL+"/v1/chat/completions", "X-data-parallel-rank", "2", chat)
	wantStream := `data: {"error": {"message": "` + want + `", "type": "BadRequestError", "param": null, "code": 400}}` + "\n\ndata: [DONE]\n\n"
	if diff := cmp.Diff(wantStream, string(b)); code != http.StatusOK || diff != "" {
		t.Errorf("streamed chat, rank 2: status %d, body (-want +got):\n%s", code, diff)
	}
	msgs := endpointBody("/v1/messages", "range")
	msgs["stream"] = true
	code, b = postRank(t, p.URL+"/v1/messages", "X-data-parallel-rank", "2", msgs)
	if code != http.StatusOK || !strings.HasPrefix(string(b), "event: error\n") || !strings.Contains(string(b), `"type":"internal_error"`) {
		t.Errorf("streamed messages, rank 2: %d %s, want a 200 stream of one error event", code, b)
	}
	if code, b := postRank(t, p.URL+"/v1/chat/completions", "X-data-parallel-rank", "one", endpointBody("/v1/chat/completions", "nan")); code != http.StatusOK {
		t.Errorf("rank %q (not an integer): %d %s, want it balanced and answered", "one", code, b)
	}
	// One engine refuses rank 1 too (vLLM checks the rank without data
	// parallelism) and takes rank 0.
	one := simproc.Start(t, "--sim-time-scale", fast)
	if code, b := postRank(t, one.URL+"/v1/chat/completions", "X-data-parallel-rank", "1", endpointBody("/v1/chat/completions", "one")); code != http.StatusBadRequest ||
		!strings.Contains(string(b), "data_parallel_rank 1 is out of range [0, 1).") {
		t.Errorf("one engine, rank 1: %d %s, want 400", code, b)
	}
	if code, b := postRank(t, one.URL+"/v1/chat/completions", "X-data-parallel-rank", "0", endpointBody("/v1/chat/completions", "one")); code != http.StatusOK {
		t.Errorf("one engine, rank 0: %d %s, want 200", code, b)
	}
}

// dpFamilies are the series vLLM 0.32 labels per engine with data
// parallelism (measured on its CPU build).
var dpFamilies = []string{"vllm:prompt_tokens_total", "vllm:num_requests_running", "vllm:num_requests_waiting",
	"vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
	"vllm:generation_tokens_total", "vllm:num_preemptions_total", "vllm:cache_config_info"}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestDPMetrics: every engine's series under its engine label on
// /metrics; /metrics/?name[]= answers an empty body with several engines,
// as vLLM's multiprocess collector does, and only the named series with one.
func TestDPMetrics(t *testing.T) {
	for _, tc := range []struct {
		dp      string
		engines []string
	}{{"1", []string{"0"}}, {"3", []string{"0", "1", "2"}}} {
		p := simproc.Start(t, "--sim-time-scale", fast, "--data-parallel-size="+tc.dp)
		for _, f := range dpFamilies {
			got := perEngine(t, p.URL, f)
			var engines []string
			for _, e := range []string{"", "0", "1", "2", "3"} {
				if _, ok := got[e]; ok {
					engines = append(engines, e)
				}
			}
			if diff := cmp.Diff(tc.engines, engines); diff != "" {
				t.Errorf("dp %s: %s engine labels (-want +got):\n%s", tc.dp, f, diff)
			}
		}
		code, whole := getBody(t, p.URL+"/metrics/")
		if code != http.StatusOK || !strings.Contains(whole, "vllm:num_requests_running{") {
			t.Errorf("dp %s: GET /metrics/ without name[]: %d, want every series", tc.dp, code)
		}
		code, filtered := getBody(t, p.URL+"/metrics/?name[]=vllm:num_requests_running")
		switch {
		case code != http.StatusOK:
			t.Errorf("dp %s: filtered /metrics/: status %d", tc.dp, code)
		case tc.dp == "1" && (!strings.Contains(filtered, "vllm:num_requests_running{") || strings.Contains(filtered, "vllm:prompt_tokens_total")):
			t.Errorf("dp 1: /metrics/?name[]=vllm:num_requests_running answered %q, want that series alone", filtered)
		case tc.dp != "1" && filtered != "":
			t.Errorf("dp %s: /metrics/?name[]= answered %q, want an empty body (vLLM's multiprocess collector)", tc.dp, filtered)
		}
	}
}

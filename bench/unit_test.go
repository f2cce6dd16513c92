package bench

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/router/schema"
)

func TestParseEngineMetrics(t *testing.T) {
	page := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:num_requests_running{engine="1",model_name="m"} 0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 100
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="1",model_name="m"} 7
`
	s, err := parseEngineMetrics([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	want := sample{"0": {Running: 2, Waiting: 3, Hits: 600, Queries: 1000, CounterKnownSet: true},
		"1": {Hits: 100, Queries: 500, CounterKnownSet: true, Preemptions: 7, PreemptKnown: true}}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s.busy() != 1 {
		t.Errorf("busy = %d, want 1", s.busy())
	}
	// Names without _total and without an engine label: one replica.
	s, err = parseEngineMetrics([]byte("vllm:prefix_cache_queries 10\nvllm:prefix_cache_hits 4\nvllm:num_requests_running 1\n"))
	if err != nil || s["0"].Queries != 10 || s["0"].Hits != 4 || s.busy() != 1 {
		t.Errorf("untyped page: %+v, %v", s, err)
	}
	if _, err := parseEngineMetrics([]byte("vllm:x{ 1\n")); err == nil {
		t.Error("a broken page parsed without error")
	}
}

func TestPrefixDelta(t *testing.T) {
	before := sample{"0": {Hits: 100, Queries: 200, HostHits: 7, CounterKnownSet: true}, "1": {Hits: 50, Queries: 80, CounterKnownSet: true}}
	after := sample{
		"0": {Hits: 160, Queries: 300, HostHits: 37, CounterKnownSet: true}, // +60/+100, +30 from the host tier
		"1": {Hits: 10, Queries: 20, CounterKnownSet: true},                 // restarted: counts from 0
		"2": {Hits: 5, Queries: 5, CounterKnownSet: true},                   // new replica
		"3": {Running: 1},                                                   // no counters
	}
	h, q, x, ok := prefixDelta(before, after)
	if !ok || h != 75 || q != 125 || x != 30 {
		t.Errorf("delta = %v/%v host %v ok %v, want 75/125 host 30 true", h, q, x, ok)
	}
	if _, _, _, ok := prefixDelta(nil, sample{"0": {Running: 1}}); ok {
		t.Error("no counters reported but ok")
	}
}

func TestEngineStats(t *testing.T) {
	before := sample{"0": {Preemptions: 5, PreemptKnown: true}, "1": {Preemptions: 9, PreemptKnown: true}}
	after := sample{
		"0": {Running: 2, Waiting: 1, Preemptions: 8, PreemptKnown: true}, // +3
		"1": {Running: 1, Preemptions: 2, PreemptKnown: true},             // restarted: counts from 0
	}
	polls := []pollStat{before.stat(), after.stat()}
	if diff := cmp.Diff([]pollStat{{}, {Busy: 2, Running: 3, Waiting: 1}}, polls); diff != "" {
		t.Errorf("poll stats (-want +got):\n%s", diff)
	}
	var s StageSummary
	s.addEngineStats(polls, before, after, true)
	if s.RunningMean == nil || *s.RunningMean != 1.5 || *s.WaitingMean != 0.5 || s.Preemptions == nil || *s.Preemptions != 5 {
		t.Errorf("running %v waiting %v preemptions %v, want 1.5 0.5 5", s.RunningMean, s.WaitingMean, s.Preemptions)
	}
	var none StageSummary
	none.addEngineStats(nil, nil, sample{"0": {Running: 1}}, true)
	if none.RunningMean != nil || none.Preemptions != nil {
		t.Errorf("no polls and no counters must leave the fields unknown: %+v", none)
	}
}

func TestWardenStatusSample(t *testing.T) {
	body, err := json.Marshal(schema.Status{Policy: "sticky", Replicas: []schema.Replica{
		{Rank: 0, Running: 3, Waiting: 2, PrefixHits: 7, PrefixQueries: 9, Preemptions: 4}, {Rank: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var answer atomic.Value
	answer.Store(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(answer.Load().([]byte))
	}))
	defer srv.Close()
	tg := &Target{URL: srv.URL, hc: srv.Client(), Warden: true}
	s, err := tg.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The warden reports every counter (0 when the engine has said nothing yet).
	want := sample{"0": {Running: 3, Waiting: 2, Hits: 7, Queries: 9, CounterKnownSet: true, Preemptions: 4, PreemptKnown: true},
		"1": {CounterKnownSet: true, PreemptKnown: true}}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if pol, err := tg.Policy(context.Background()); err != nil || pol != "sticky" {
		t.Errorf("Policy() = %q, %v; want sticky", pol, err)
	}
	answer.Store([]byte(`{"replicas":"nope"}`))
	if _, err := tg.Sample(context.Background()); err == nil {
		t.Error("a malformed status was read")
	}
}

func TestTextGen(t *testing.T) {
	a := newTextGen(int64(1), "x", 3).text(5000)
	b := newTextGen(int64(1), "x", 3).text(5000)
	c := newTextGen(int64(2), "x", 3).text(5000)
	if len(a) != 5000 || a != b || a == c {
		t.Fatalf("len %d, same seed equal %v, other seed differs %v", len(a), a == b, a != c)
	}
	if newTextGen(1).text(0) != "" {
		t.Error("text(0) not empty")
	}
	words := strings.Fields(a)
	if avg := float64(len(a)) / float64(len(words)); avg < 4 || avg > 8 {
		t.Errorf("average %.1f characters per word, want English-like", avg)
	}
	st := newSessionText(1, Sizes{FirstTokens: 100, TurnTokens: 10, CharsPerToken: 4}, 4, 0)
	if first, next := st.next(), st.next(); len(first) != 400 || len(next) != 40 {
		t.Errorf("first %d chars, follow-up %d chars; want 400, 40", len(first), len(next))
	}
	other := newSessionText(1, Sizes{FirstTokens: 100, TurnTokens: 10, CharsPerToken: 4}, 4, 1)
	again := newSessionText(1, Sizes{FirstTokens: 100, TurnTokens: 10, CharsPerToken: 4}, 4, 0)
	if x, y := other.next(), again.next(); x == y || y != newSessionText(1, Sizes{FirstTokens: 100, TurnTokens: 10, CharsPerToken: 4}, 4, 0).next() {
		t.Error("first messages must be unique per session and reproducible per seed")
	}
}

func streamResp(code int, body string) *http.Response {
	return &http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}}
}

func TestReadStream(t *testing.T) {
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	anth := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":90,\"cache_read_input_tokens\":10}}}\n\n" +
		"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi \\\"you\\\"\"}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"!\"}}\n\n" +
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n" +
		"data: {\"type\":\"message_stop\"}\n\n"
	var r turnResult
	if err := readStream(streamResp(200, anth), APIAnthropic, &r, now); err != nil {
		t.Fatal(err)
	}
	if r.Text != `Hi "you"!` || r.OutputTokens != 3 || r.PromptTokens != 90 || r.CachedTokens != 10 || r.FirstToken != time.Unix(1, 0) {
		t.Errorf("anthropic: %+v", r)
	}
	oai := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n" +
		"data: [DONE]\n\n"
	r = turnResult{}
	if err := readStream(streamResp(200, oai), APIOpenAI, &r, now); err != nil {
		t.Fatal(err)
	}
	if r.Text != "a" || r.OutputTokens != 7 || r.PromptTokens != 50 || r.CachedTokens != 32 || !r.UsageSeen {
		t.Errorf("openai: %+v", r)
	}
	// Without a usage chunk the content deltas are counted.
	r = turnResult{}
	_ = readStream(streamResp(200, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n"), APIOpenAI, &r, now)
	if r.OutputTokens != 2 || r.UsageSeen {
		t.Errorf("no usage: %+v", r)
	}
	for name, c := range map[string]struct {
		resp *http.Response
		api  API
		want string
	}{
		"http error": {streamResp(503, "overloaded"), APIAnthropic, "HTTP 503: overloaded"},
		"truncated":  {streamResp(200, strings.Split(anth, "data: {\"type\":\"message_stop")[0]), APIAnthropic, "without its final event"},
		"sse error":  {streamResp(200, "data: {\"type\":\"error\",\"error\":{\"message\":\"boom\"}}\n\n"), APIAnthropic, "boom"},
		"oai error":  {streamResp(200, "data: {\"error\":{\"message\":\"bad\"}}\n\n"), APIOpenAI, "bad"},
	} {
		r = turnResult{}
		if err := readStream(c.resp, c.api, &r, now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", name, err, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	yes, no := true, false
	turns := []TurnRecord{
		{Session: 0, Turn: 1, TTFBS: 1, OutputTokens: 10, PromptTokens: 1000, InStage: true},
		{Session: 0, Turn: 2, TTFBS: 2, OutputTokens: 10, InStage: true, LastTurn: true, Stayed: &yes},
		{Session: 1, Turn: 1, TTFBS: 3, OutputTokens: 10, PromptTokens: 3000, InStage: true},
		{Session: 1, Turn: 2, TTFBS: 4, OutputTokens: 10, InStage: true, Stayed: &no, Error: "HTTP 500"},
		{Session: 2, Turn: 1, TTFBS: 100, OutputTokens: 10, InStage: false}, // late: excluded
		{Session: 3, Turn: 2, TTFBS: 5, OutputTokens: 10, InStage: true, Stayed: &no},
	}
	s := summarize("sticky", 2, 60, turns, []int{1, 2, 2, 3}, 30, 40, true)
	if s.Turns != 4 || s.Errors != 1 || s.Late != 1 || s.SessionsFinished != 1 || s.SessionsStarted != 4 || s.OutputTokens != 40 {
		t.Errorf("counts: %+v", s)
	}
	if s.OutputPerMin != 40 || s.SessionsPerHour != 60 {
		t.Errorf("rates: %v/min %v/h, want 40 and 60", s.OutputPerMin, s.SessionsPerHour)
	}
	// TTFB of 1,2,3,5: p50 = 2.5, p95 = 3 + 0.85*2 = 4.7
	if math.Abs(*s.TTFBP50-2.5) > 1e-9 || math.Abs(*s.TTFBP95-4.7) > 1e-9 {
		t.Errorf("p50 %v p95 %v, want 2.5 4.7", *s.TTFBP50, *s.TTFBP95)
	}
	if *s.ReplicasBusy != 2 || *s.PrefixHitPct != 75 || *s.StayedPct != 50 || *s.MeanPromptFirst != 2000 {
		t.Errorf("busy %v hit %v stayed %v first %v", *s.ReplicasBusy, *s.PrefixHitPct, *s.StayedPct, *s.MeanPromptFirst)
	}
	if e := summarize("", 1, 60, nil, nil, 0, 0, false); e.TTFBP50 != nil || e.ReplicasBusy != nil || e.PrefixHitPct != nil || e.StayedPct != nil {
		t.Errorf("empty stage must have unknown columns: %+v", e)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.URL = "http://127.0.0.1:8000"
	if err := good.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"--url":         func(c *Config) { c.URL = "127.0.0.1:8000" },
		"--api":         func(c *Config) { c.API = "grpc" },
		"--stages":      func(c *Config) { c.Stages = []int{4, 0} },
		"--time-scale":  func(c *Config) { c.TimeScale = 0.5 },
		"--ab":          func(c *Config) { c.Variants = []string{"off"} },
		"--max-tokens":  func(c *Config) { c.MaxTokens = 0 },
		"--chars-per":   func(c *Config) { c.Sizes.CharsPerToken = -1 },
		"--stage":       func(c *Config) { c.Stage = 0 },
		"token sizes":   func(c *Config) { c.Sizes.FirstTokens = 0 },
		"--turns":       func(c *Config) { c.Turns = -1 },
		"--poll":        func(c *Config) { c.Poll = 0 },
		"--drain":       func(c *Config) { c.Drain = -time.Second },
		"--stages none": func(c *Config) { c.Stages = nil },
		"--stages dup":  func(c *Config) { c.Stages = []int{4, 8, 4} },
	} {
		c := good
		mutate(&c)
		err := c.Validate()
		flag := strings.Fields(name)[0]
		if err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(flag, "-per")) {
			t.Errorf("%s: err %v, want a message naming it", name, err)
		}
	}
	if _, err := parseInts("4,x"); err == nil {
		t.Error("parseInts accepted x")
	}
	if v := parseVariants("none"); v != nil {
		t.Errorf("none = %v", v)
	}
	if diff := cmp.Diff([]string{"off", "sticky"}, parseVariants(" off, sticky ")); diff != "" {
		t.Error(diff)
	}
}

func TestMeasureCharsPerToken(t *testing.T) {
	// A template of 12 tokens plus 5 characters per token: the difference of
	// two lengths cancels the template.
	cpt, err := measureCharsPerToken(func(s string) (int, error) { return 12 + len(s)/5, nil })
	if err != nil || cpt != 5 {
		t.Errorf("got %v, %v; want 5", cpt, err)
	}
	if _, err := measureCharsPerToken(func(string) (int, error) { return 7, nil }); err == nil {
		t.Error("a constant count must be an error")
	}
	if _, err := measureCharsPerToken(func(string) (int, error) { return 0, io.ErrUnexpectedEOF }); err == nil {
		t.Error("a failing tokenizer must be an error")
	}
}

func TestMarkdownShowsHostHitsOnlyWithATier(t *testing.T) {
	v := 12.5
	res := &Results{Stages: []StageSummary{{Sessions: 4, OutputPerMin: 100}}, Config: configJSON{Stages: []int{4}}}
	if md := Markdown(res); strings.Contains(md, "host hit %") {
		t.Errorf("a host hit column without a tier:\n%s", md)
	}
	res.Stages[0].HostHitPct = &v
	if md := Markdown(res); !strings.Contains(md, "host hit %") || !strings.Contains(md, "12.5") {
		t.Errorf("no host hit column with a tier:\n%s", md)
	}
}

func TestSummarizeLag(t *testing.T) {
	ms := time.Millisecond
	late := []time.Duration{9 * ms, 0, 1 * ms, 2 * ms, 1 * ms}
	got := summarizeLag(late)
	// numpy's linear interpolation over 0,1,1,2,9 ms: p50 1 ms, p99 at
	// rank 3.96 = 2 + 0.96 x 7 ms.
	if got.N != 5 || got.P50 != ms || got.Max != 9*ms || got.P99 != 2*ms+time.Duration(0.96*7*float64(ms)) {
		t.Errorf("summarizeLag = %+v", got)
	}
	if (summarizeLag(nil) != lagStats{}) {
		t.Errorf("no samples: %+v", summarizeLag(nil))
	}
}

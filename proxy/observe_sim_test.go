package proxy

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/internal/usage"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/panel"
	"github.com/lmwarden/warden/router/place"
)

// observed is what the clients themselves saw, per replica.
type observed struct {
	requests, newTurns, sticky map[int]int
	prompt, cached, completion map[int]int64
	sessions                   map[string]bool
}

// TestSimStatusNumbersMatchWhatHappened drives the proxy on two simulators
// with OpenAI and Anthropic turns, streaming and not, then checks every
// number of the status, the /metrics exposition and the exit summary
// against what the requests reported and what the engines counted.
func TestSimStatusNumbersMatchWhatHappened(t *testing.T) {
	procs, bs := startSims(t, 2)
	reg := prometheus.NewPedanticRegistry()
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Policy: place.PolicySticky, Registry: reg}}, bs)
	coreOf(p).CheckNow(context.Background()) // baseline of the engine counters: zero
	o := observed{requests: map[int]int{}, newTurns: map[int]int{}, sticky: map[int]int{},
		prompt: map[int]int64{}, cached: map[int]int64{}, completion: map[int]int64{}, sessions: map[string]bool{}}

	sys := words("sys", 300)
	for i := range 4 { // OpenAI chat, non-streaming: usage in the body
		c := newConversation(front.URL, fmt.Sprintf("chat-%d", i), sys, words(fmt.Sprintf("c%d-", i), 200))
		for turn := range 3 {
			rank, route, prompt, cached := c.turn(t, words(fmt.Sprintf("c%d-t%d-", i, turn), 30))
			o.note(c.id, rank, route)
			o.prompt[rank] += prompt
			o.cached[rank] += cached
			o.completion[rank] += 16
		}
	}
	for i := range 2 { // Anthropic, streaming: usage in message_start / message_delta
		id := fmt.Sprintf("anthropic-%d", i)
		for turn := range 2 {
			body := fmt.Sprintf(`{"model":"test-model","max_tokens":8,"stream":true,"system":[{"type":"text","text":%q}],`+
				`"messages":[{"role":"user","content":%q}]}`, sys, words(fmt.Sprintf("a%d-", i), 100+turn))
			resp, out := post(t, front.URL+"/v1/messages?beta=true", body, "X-Claude-Code-Session-Id", id)
			if resp.StatusCode != 200 || !strings.Contains(out, "message_stop") {
				t.Fatalf("anthropic turn: %d %s", resp.StatusCode, out)
			}
			rank, _ := strconv.Atoi(resp.Header.Get(identity.PinHeader))
			o.note(id, rank, resp.Header.Get(routeHeader))
			u := anthropicUsage(out)
			o.prompt[rank] += int64(u.Prompt)
			o.cached[rank] += int64(u.Cached)
			o.completion[rank] += int64(u.Output)
		}
	}
	settled(t, p)
	coreOf(p).CheckNow(context.Background())
	st := coreOf(p).Status()

	for r, proc := range procs {
		row := st.Replicas[r]
		eng := proc.Metrics(t)
		checks := []struct {
			what      string
			got, want float64
		}{
			{"requests", float64(row.Requests), float64(o.requests[r])},
			{"new", float64(row.New), float64(o.newTurns[r])},
			{"sticky", float64(row.Sticky), float64(o.sticky[r])},
			{"prompt tokens (usage)", float64(row.PromptTokens), float64(o.prompt[r])},
			{"cached tokens (usage)", float64(row.CachedTokens), float64(o.cached[r])},
			{"completion tokens (usage)", float64(row.CompletionTokens), float64(o.completion[r])},
			{"engine prompt tokens", row.EnginePrompt, eng["vllm:prompt_tokens_total"]},
			{"engine generation tokens", row.EngineGenerated, eng["vllm:generation_tokens_total"]},
			{"prefix queries", row.PrefixQueries, eng["vllm:prefix_cache_queries_total"]},
			{"prefix hits", row.PrefixHits, eng["vllm:prefix_cache_hits_total"]},
			{"usage vs engine prompt", float64(row.PromptTokens), eng["vllm:prompt_tokens_total"]},
			{"running", row.Running, eng["vllm:num_requests_running"]},
			{"in flight", float64(row.InFlight), 0},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("replica %d %s: status %v, actual %v", r, c.what, c.got, c.want)
			}
		}
		if want, _, err := simproc.KVCapacity(proc.URL); err != nil || row.KVCapacityTokens != want {
			t.Errorf("replica %d KV capacity %d, engine says %d", r, row.KVCapacityTokens, want)
		}
		if row.PrefixQueries > 0 && row.HitRate != row.PrefixHits/row.PrefixQueries {
			t.Errorf("replica %d hit rate %v != hits/queries", r, row.HitRate)
		}
	}
	if st.Sessions != len(o.sessions) || st.SessionsSeen != uint64(len(o.sessions)) {
		t.Errorf("sessions %d (seen %d), clients used %d", st.Sessions, st.SessionsSeen, len(o.sessions))
	}
	if st.StickyShare != 1 {
		t.Errorf("sticky share %v, every follow-up turn stayed home", st.StickyShare)
	}
	total := o.requests[0] + o.requests[1]
	if st.Totals.Requests != uint64(total) {
		t.Errorf("total requests %d, clients made %d", st.Totals.Requests, total)
	}
	if got, _ := metric(t, coreOf(p).Registry(), "warden_requests_total", "route", "sticky"); got != float64(total-len(o.sessions)) {
		t.Errorf("warden_requests_total{route=sticky} = %v, want %d", got, total-len(o.sessions))
	}
	var sum bytes.Buffer
	panel.WriteSummary(&sum, st)
	for r := range procs {
		row := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+%d\s+%d\s+100\.0%%`, r, o.requests[r]))
		if !row.MatchString(sum.String()) {
			t.Errorf("summary lacks replica %d with %d requests, all sticky:\n%s", r, o.requests[r], sum.String())
		}
	}
}

func (o *observed) note(session string, rank int, route string) {
	o.requests[rank]++
	o.sessions[session] = true
	switch route {
	case "new":
		o.newTurns[rank]++
	case "sticky":
		o.sticky[rank]++
	}
}

// anthropicUsage reads the usage of an Anthropic SSE stream: the last value
// of each field (message_start carries the whole prompt, message_delta the
// split into uncached input and cache reads, and the output count).
func anthropicUsage(stream string) usage.Anthropic {
	var u usage.Anthropic
	for _, line := range strings.Split(stream, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			for _, path := range []string{"message.usage", "usage"} {
				if v := gjson.Get(data, path); v.IsObject() {
					a := usage.ParseAnthropic(v)
					if a.HasPrompt {
						u.Prompt = a.Prompt
					}
					if a.HasCached {
						u.Cached = a.Cached
					}
					if a.HasOutput {
						u.Output = a.Output
					}
				}
			}
		}
	}
	return u
}

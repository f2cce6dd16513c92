package realvllm_test

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/internal/usage"
)

// system is a shared system prompt of about 700 tokens of the tiny model's
// tokenizer: 21 full 32-token blocks that a second turn finds cached.
var system = words("You are a coding agent.", 330)

// TestServeCPU runs `warden serve --device cpu --dp 2` in front of two real
// vLLM CPU engines and walks through what a user and their agents do, in
// order: it ends with an engine crash and restart and a SIGINT drain.
func TestServeCPU(t *testing.T) {
	needEngine(t)
	// Dev mode: vLLM serves /reset_prefix_cache only with it.
	w := startWarden(t, []string{"VLLM_SERVER_DEV_MODE=1"}, engineArgs(2)...)

	t.Run("startup progress and the ready line", func(t *testing.T) {
		errs := w.stderr.String()
		for _, want := range []string{"rank 0  CPU 0", "rank 1  CPU 1", "loading", "healthy", `msg="engines ready" vllm_version=0.32.0`} {
			if !strings.Contains(errs, want) {
				t.Errorf("startup output lacks %q:\n%s", want, errs)
			}
		}
		if !strings.Contains(w.stdout.String(), "warden: ready at "+w.url+" (2 x "+served) {
			t.Errorf("ready line: %q", w.stdout.String())
		}
		st := w.status(t)
		if len(st.Replicas) != 2 || !st.Replicas[0].Up || !st.Replicas[1].Up {
			t.Fatalf("replicas not both up: %+v", st.Replicas)
		}
		for i, r := range st.Replicas {
			if want := fmt.Sprintf("CPU %d", i); len(r.GPUs) != 1 || r.GPUs[0] != want {
				t.Errorf("replica %d runs on %v, want %s (its own core)", i, r.GPUs, want)
			}
		}
	})

	t.Run("models: the engine's entry under the served name", func(t *testing.T) {
		body := get(t, w.url+"/v1/models")
		m := jsonGet(body, "data.0")
		if m.Get("id").Str != served || m.Get("max_model_len").Int() != 4096 || m.Get("owned_by").Str != "vllm" ||
			m.Get("root").Str != install.model {
			t.Errorf("/v1/models: %s", body)
		}
	})

	t.Run("chat completions, whole and streamed", func(t *testing.T) {
		resp, body := post(t, w.url+"/v1/chat/completions", chat(msgs("user", "hello"), ""))
		if resp.StatusCode != 200 || jsonGet(body, "usage.completion_tokens").Int() != 8 ||
			jsonGet(body, "choices.0.finish_reason").Str != "length" {
			t.Fatalf("chat: %s %s", resp.Status, body)
		}
		// vLLM 0.32 reports prompt_tokens_details with cached_tokens 0, not null.
		if d := jsonGet(body, "usage.prompt_tokens_details"); !d.Get("cached_tokens").Exists() {
			t.Errorf("prompt_tokens_details %s: want cached_tokens present", d.Raw)
		}

		before := w.status(t)
		resp, body = post(t, w.url+"/v1/chat/completions", chat(msgs("user", "stream it"), `,"stream":true`))
		data := sseData(body)
		if resp.StatusCode != 200 || len(data) < 3 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("stream: %s %s", resp.Status, body)
		}
		if strings.Contains(body, `"usage"`) {
			t.Errorf("the client did not ask for usage but got it:\n%s", body)
		}
		rank := rankOf(t, resp)
		eventually(t, 5*time.Second, "the stripped usage chunk counted", func() bool {
			return w.status(t).Replicas[rank].PromptTokens > before.Replicas[rank].PromptTokens
		})

		_, body = post(t, w.url+"/v1/chat/completions", chat(msgs("user", "with usage"), `,"stream":true,"stream_options":{"include_usage":true}`))
		data = sseData(body)
		last := data[len(data)-2]
		if jsonGet(last, "choices").Raw != "[]" || jsonGet(last, "usage.completion_tokens").Int() != 8 {
			t.Errorf("usage chunk %s", last)
		}
	})

	t.Run("anthropic messages streamed, count_tokens agrees", func(t *testing.T) {
		// ignore_eos as the bench sends it: vLLM's Messages endpoint has no
		// such field and must take the request anyway.
		body := `{"model":"` + served + `","max_tokens":6,"ignore_eos":true,"stream":true,"system":` + strconv.Quote(system) +
			`,"messages":[{"role":"user","content":"list the files"}]}`
		sid := "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c"
		var u usage.Anthropic
		for turn := 0; turn < 2; turn++ {
			resp, out := post(t, w.url+"/v1/messages?beta=true", body, "X-Claude-Code-Session-Id", sid, "anthropic-version", "2023-06-01")
			want := []string{"message_start", "content_block_start"}
			ev := sseEvents(out)
			if resp.StatusCode != 200 || len(ev) < 5 || ev[0] != want[0] || ev[1] != want[1] || ev[len(ev)-1] != "message_stop" {
				t.Fatalf("turn %d: %s events %v\n%s", turn, resp.Status, ev, out)
			}
			for _, d := range sseData(out) {
				if jsonGet(d, "type").Str == "message_delta" {
					u = usage.ParseAnthropic(jsonGet(d, "usage"))
					// vLLM 0.32: input_tokens excludes cache reads and writes.
					if !jsonGet(d, "usage.cache_creation_input_tokens").Exists() || u.Output < 1 || u.Output > 6 {
						t.Errorf("turn %d message_delta %s", turn, d)
					}
				}
			}
		}
		if u.Cached == 0 || u.Cached >= u.Prompt {
			t.Errorf("second turn: %d of %d prompt tokens cached, want most", u.Cached, u.Prompt)
		}
		count := strings.Replace(strings.Replace(body, `"stream":true,`, "", 1), `"ignore_eos":true,`, "", 1)
		resp, out := post(t, w.url+"/v1/messages/count_tokens", count)
		if resp.StatusCode != 200 || uint64(jsonGet(out, "input_tokens").Int()) != u.Prompt {
			t.Errorf("count_tokens %s %s, want input_tokens %d (the prompt the engine served)", resp.Status, out, u.Prompt)
		}
	})

	t.Run("model names map to the served one; vLLM alone refuses them", func(t *testing.T) {
		st := w.status(t)
		direct, out := post(t, st.Replicas[0].URL+"/v1/chat/completions", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		if direct.StatusCode != 404 || !strings.Contains(out, "does not exist") {
			t.Fatalf("the engine itself: %s %s (want its 404)", direct.Status, out)
		}
		resp, out := post(t, w.url+"/v1/chat/completions", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		if resp.StatusCode != 200 || jsonGet(out, "model").Str != served {
			t.Errorf("through the warden: %s %s", resp.Status, out)
		}
	})

	t.Run("an output limit beyond the context is retried with the context", func(t *testing.T) {
		body := `{"model":"` + served + `","max_tokens":32000,"messages":[{"role":"user","content":"hi"}]}`
		st := w.status(t)
		direct, out := post(t, st.Replicas[0].URL+"/v1/messages", body)
		if direct.StatusCode != 400 || !strings.Contains(out, "max_completion_tokens=32000 cannot be greater than max_model_len=4096") {
			t.Fatalf("the engine itself: %s %s (want vLLM 0.32's refusal)", direct.Status, out)
		}
		resp, out := post(t, w.url+"/v1/messages", body)
		if resp.StatusCode != 200 || jsonGet(out, "type").Str != "message" {
			t.Errorf("through the warden: %s %s", resp.Status, out)
		}
	})

	t.Run("a conversation's second turn is cached on its replica only", func(t *testing.T) {
		turn1 := msgs("system", system, "user", words("task one", 40))
		resp, out := post(t, w.url+"/v1/chat/completions", chat(turn1, ""), "X-Session-Id", "conv-1")
		home := rankOf(t, resp)
		reply := jsonGet(out, "choices.0.message.content").Str
		turn2 := msgs("system", system, "user", words("task one", 40), "assistant", reply, "user", "and now the tests")
		resp, out = post(t, w.url+"/v1/chat/completions", chat(turn2, ""), "X-Session-Id", "conv-1")
		cached, prompt := jsonGet(out, "usage.prompt_tokens_details.cached_tokens").Int(), jsonGet(out, "usage.prompt_tokens").Int()
		if rankOf(t, resp) != home || resp.Header.Get("X-Warden-Route") != "sticky" {
			t.Errorf("turn 2 on replica %d (%s), want %d sticky", rankOf(t, resp), resp.Header.Get("X-Warden-Route"), home)
		}
		if cached < prompt/2 || cached%32 != 0 {
			t.Errorf("turn 2 on its replica: %d of %d prompt tokens cached, want most, in whole 32-token blocks", cached, prompt)
		}
		other := 1 - home
		resp, out = post(t, w.url+"/v1/chat/completions", chat(turn2, ""), "X-Warden-Replica", strconv.Itoa(other))
		if rankOf(t, resp) != other {
			t.Fatalf("the pin to %d went to %d", other, rankOf(t, resp))
		}
		// The system prompt is shared with the Anthropic turns above, which may
		// have run on the other replica: only its blocks can hit there.
		if got := jsonGet(out, "usage.prompt_tokens_details.cached_tokens").Int(); got >= cached {
			t.Errorf("turn 2 on the other replica: %d cached, want fewer than the %d of its own", got, cached)
		}
	})

	t.Run("tool calls on by default, forced calls on three APIs, results continue cached", func(t *testing.T) {
		toolCalls(t, w)
	})

	t.Run("reset_prefix_cache empties every replica's cache", func(t *testing.T) {
		turn := chat(msgs("system", system, "user", "a question asked twice"), "")
		resp, _ := post(t, w.url+"/v1/chat/completions", turn, "X-Session-Id", "reset-1")
		rank := strconv.Itoa(rankOf(t, resp))
		if _, out := post(t, w.url+"/v1/chat/completions", turn, "X-Warden-Replica", rank); jsonGet(out, "usage.prompt_tokens_details.cached_tokens").Int() == 0 {
			t.Fatalf("the repeated request was not cached: %s", jsonGet(out, "usage").Raw)
		}
		if resp, out := post(t, w.url+"/warden/reset_prefix_cache", ""); resp.StatusCode != 200 {
			t.Fatalf("reset: %s %s", resp.Status, out)
		}
		if _, out := post(t, w.url+"/v1/chat/completions", turn, "X-Warden-Replica", rank); jsonGet(out, "usage.prompt_tokens_details.cached_tokens").Int() != 0 {
			t.Errorf("cached after the reset: %s", jsonGet(out, "usage").Raw)
		}
	})

	t.Run("engine metrics reach the status", func(t *testing.T) {
		st := w.status(t)
		for _, r := range st.Replicas {
			m, err := simproc.ScrapeMetrics(r.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			capacity, size, err := simproc.KVCapacity(r.URL)
			if err != nil || size != 32 || capacity == 0 || r.KVCapacityTokens != capacity {
				t.Errorf("replica %d: kv capacity %d, want num_gpu_blocks x block_size %d (block %d) from cache_config_info (%v)",
					r.Rank, r.KVCapacityTokens, capacity, size, err)
			}
			eventually(t, 5*time.Second, "prefix counters equal the engine's", func() bool {
				r := w.status(t).Replicas[r.Rank]
				m, _ = simproc.ScrapeMetrics(r.URL + "/metrics")
				return r.PrefixQueries == m["vllm:prefix_cache_queries_total"] && r.PrefixHits == m["vllm:prefix_cache_hits_total"] &&
					r.EnginePrompt == m["vllm:prompt_tokens_total"]
			})
		}
		// A long generation shows as running with KV in use.
		resp := postStream(t, w.url+"/v1/chat/completions", chat(msgs("user", "go on"), `,"stream":true,"max_tokens":3000`), "X-Warden-Replica", "0")
		defer resp.Body.Close()
		bufio.NewReader(resp.Body).ReadString('\n')
		eventually(t, 10*time.Second, "replica 0 reports a running request and KV in use", func() bool {
			r := w.status(t).Replicas[0]
			return r.Running >= 1 && r.KVUsed > 0
		})
	})

	t.Run("warden route in front of the running engines", func(t *testing.T) {
		st := w.status(t)
		rt := startWarden(t, nil, "route", "--replica", st.Replicas[0].URL, "--replica", st.Replicas[1].URL)
		resp, out := post(t, rt.url+"/v1/chat/completions", chat(msgs("user", "routed"), ""))
		if resp.StatusCode != 200 || jsonGet(out, "usage.completion_tokens").Int() != 8 {
			t.Errorf("through route: %s %s", resp.Status, out)
		}
		rs := rt.status(t)
		if len(rs.Replicas) != 2 || !rs.Replicas[0].Up || rs.Replicas[0].KVCapacityTokens != st.Replicas[0].KVCapacityTokens {
			t.Errorf("route's status: %+v", rs.Replicas)
		}
		if m := jsonGet(get(t, rt.url+"/v1/models"), "data.0"); m.Get("id").Str != served || m.Get("max_model_len").Int() != 4096 {
			t.Errorf("route's /v1/models: %s", m.Raw)
		}
		rt.cmd.Process.Signal(syscall.SIGINT)
		if err := <-rt.done; err != nil {
			t.Errorf("route exited with %v", err)
		}
	})

	t.Run("SIGKILL of an engine mid-stream: an error event, a restart, no orphan", func(t *testing.T) {
		const rank = 1
		st := w.status(t)
		engine := engineTree(t, w.cmd.Process.Pid, st.Replicas[rank].Port)
		names := map[string]bool{}
		for _, p := range engine {
			names[p.name] = true
		}
		if !names["VLLM::EngineCore"] || !names["VLLM::Worker"] {
			t.Fatalf("engine tree of rank %d lacks EngineCore or Worker: %+v", rank, engine)
		}
		resp := postStream(t, w.url+"/v1/chat/completions", chat(msgs("user", "long answer"), `,"stream":true,"max_tokens":3500`),
			"X-Warden-Replica", strconv.Itoa(rank))
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		for _, p := range engine {
			if p.name == "VLLM::EngineCore" || p == engine[0] {
				syscall.Kill(int(p.pid), syscall.SIGKILL)
			}
		}
		var rest strings.Builder
		for {
			line, err := rd.ReadString('\n')
			rest.WriteString(line)
			if err != nil {
				break
			}
		}
		data := sseData(rest.String())
		if len(data) == 0 || !strings.Contains(data[len(data)-1], `"error"`) || !strings.Contains(data[len(data)-1], "replica 1") {
			t.Errorf("the stream did not end with an error event naming replica 1:\n...%s", tail(rest.String(), 600))
		}
		waitGone(t, 30*time.Second, engine) // the Worker too: the group is killed
		// Meanwhile the other replica serves.
		if resp, out := post(t, w.url+"/v1/chat/completions", chat(msgs("user", "still here?"), "")); resp.StatusCode != 200 {
			t.Errorf("while rank 1 is down: %s %s", resp.Status, out)
		}
		eventually(t, 6*time.Minute, "rank 1 restarted and healthy", func() bool {
			r := w.status(t).Replicas[rank]
			return r.Up && r.Restarts == 1
		})
		resp2, out := post(t, w.url+"/v1/chat/completions", chat(msgs("user", "after the restart"), ""), "X-Warden-Replica", strconv.Itoa(rank))
		if resp2.StatusCode != 200 {
			t.Errorf("rank 1 after its restart: %s %s", resp2.Status, out)
		}
	})

	t.Run("SIGINT drains in-flight requests and stops every engine", func(t *testing.T) {
		all := tree(int32(w.cmd.Process.Pid))
		if len(all) < 6 {
			t.Fatalf("want two engines of at least three processes each, found %+v", all)
		}
		type result struct {
			code int
			body string
		}
		got := make(chan result, 1)
		go func() {
			resp, out := post(t, w.url+"/v1/chat/completions", chat(msgs("user", "finish me"), `,"max_tokens":400`))
			got <- result{resp.StatusCode, out}
		}()
		eventually(t, 10*time.Second, "the request in flight", func() bool {
			return jsonGet(get(t, w.url+"/warden/status"), "in_flight").Int() == 1
		})
		w.cmd.Process.Signal(syscall.SIGINT)
		r := <-got
		if r.code != 200 || jsonGet(r.body, "usage.completion_tokens").Int() != 400 {
			t.Errorf("the in-flight request during the drain: %d %s", r.code, tail(r.body, 300))
		}
		select {
		case err := <-w.done:
			if err != nil {
				t.Errorf("warden exited with %v", err)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("warden did not exit after SIGINT")
		}
		waitGone(t, 30*time.Second, all)
		if !strings.Contains(w.stderr.String(), "warden summary for "+served) {
			t.Errorf("no exit summary:\n%s", tail(w.stderr.String(), 2000))
		}
	})
}

// TestWardenSIGKILLLeavesNoVLLMProcess kills the warden with SIGKILL (no
// chance to stop anything) and requires every vLLM process it started, of
// any kind, to be gone soon after.
func TestWardenSIGKILLLeavesNoVLLMProcess(t *testing.T) {
	needEngine(t)
	before := vllmProcesses()
	w := startWarden(t, nil, engineArgs(1)...)
	// Outside dev mode vLLM has no /reset_prefix_cache; the warden says how to get it.
	if resp, out := post(t, w.url+"/warden/reset_prefix_cache", ""); resp.StatusCode != 502 || !strings.Contains(out, "VLLM_SERVER_DEV_MODE=1") {
		t.Errorf("reset without dev mode: %s %s", resp.Status, out)
	}
	engine := tree(int32(w.cmd.Process.Pid))
	names := map[string]bool{}
	for _, p := range engine {
		names[p.name] = true
	}
	if !names["VLLM::EngineCore"] || !names["VLLM::Worker"] || len(engine) < 3 {
		t.Fatalf("engine tree %+v: want the API server, EngineCore and Worker", engine)
	}
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.done
	waitGone(t, 60*time.Second, engine)
	eventually(t, 30*time.Second, "no vLLM process of this install left", func() bool {
		return len(vllmProcesses()) <= len(before)
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

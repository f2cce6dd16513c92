package realvllm_test

// vLLM's own data parallelism on its CPU build: one `vllm serve
// --data-parallel-size 2`, which endpoints obey X-data-parallel-rank, and
// `warden route` in front of it pinning each conversation to one engine.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/promtext"
	"github.com/lmwarden/warden/internal/simproc"
)

// dpServer is one `vllm serve --data-parallel-size n` run by a test.
type dpServer struct {
	url    string
	cmd    *exec.Cmd
	stderr *simproc.SyncBuffer
	done   chan error // gets Wait's result
	start  time.Time
}

// startVLLMDP starts vLLM's own data parallelism on the tiny model, each
// engine bound to a core of its own where there are enough, and waits for
// its /health (up to 8 minutes). Its process group is stopped when the
// test ends.
func startVLLMDP(t *testing.T, n int) *dpServer {
	t.Helper()
	s := runVLLMDP(t, n, 0, n, false)
	s.waitHealthy(t, n)
	return s
}

// runVLLMDP starts a `vllm serve --data-parallel-size n` that runs the
// local engines first..first+local-1 (vLLM's multi-node form: a head with
// the API server and ranks from 0, or with headless another node's ranks
// without one), each bound to its own core where there are enough.
func runVLLMDP(t *testing.T, n, first, local int, headless bool, extra ...string) *dpServer {
	t.Helper()
	port := simproc.FreePort(t)
	s := &dpServer{url: "http://127.0.0.1:" + strconv.Itoa(port), stderr: &simproc.SyncBuffer{}, done: make(chan error, 1)}
	args := []string{"serve", install.model, "--data-parallel-size", strconv.Itoa(n),
		"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--served-model-name", served,
		"--kv-cache-memory-bytes", strconv.Itoa(256 << 20), "--enable-prompt-tokens-details",
		"--dtype", "float32", "--enforce-eager", "--block-size", "32", "--max-model-len", "4096",
		"--max-num-batched-tokens", "2048"}
	if local != n || headless {
		args = append(args, "--data-parallel-size-local", strconv.Itoa(local))
	}
	if first > 0 {
		// Only on a node without rank 0: vLLM 0.32 takes a start rank on
		// the head for its hybrid load balancing, which refuses --headless
		// nodes ("... headless in external or hybrid dp lb mode").
		args = append(args, "--data-parallel-start-rank", strconv.Itoa(first))
	}
	if headless {
		args = append(args, "--headless")
	}
	s.cmd = exec.Command(install.vllm, append(args, extra...)...)
	bind := "nobind"
	if runtime.NumCPU() >= first+local {
		cores := make([]string, local)
		for i := range cores {
			cores[i] = strconv.Itoa(first + i)
		}
		bind = strings.Join(cores, "|") // vLLM's per-rank form
	}
	s.cmd.Env = append(os.Environ(), "VLLM_CPU_OMP_THREADS_BIND="+bind, "VLLM_SERVER_DEV_MODE=1")
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.start = time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		if t.Failed() {
			t.Logf("vllm %s output (tail):\n%s", strings.Join(args, " "), tail(s.stderr.String(), 40))
		}
	})
	return s
}

// waitHealthy waits up to 8 minutes for the server's /health.
func (s *dpServer) waitHealthy(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(8 * time.Minute)
	for {
		if resp, err := http.Get(s.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("vllm serve --data-parallel-size %d exited: %v\n%s", n, err, tail(s.stderr.String(), 40))
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatalf("vllm serve --data-parallel-size %d not healthy after 8 minutes", n)
		}
	}
	t.Logf("vllm serve --data-parallel-size %d healthy in %s", n, time.Since(s.start).Round(time.Second))
}

// prompts reads the server's vllm:prompt_tokens_total per engine.
func (s *dpServer) prompts(t *testing.T) map[string]float64 {
	t.Helper()
	fams, err := promtext.Parse(strings.NewReader(get(t, s.url+"/metrics")))
	if err != nil {
		t.Fatal(err)
	}
	by, ok := fams.CounterBy("vllm:prompt_tokens", "engine")
	if !ok {
		t.Fatal("no vllm:prompt_tokens_total in the server's /metrics")
	}
	return by
}

// grew is which engines' prompt counters rose between two readings.
func grew(before, after map[string]float64) string {
	var out []string
	for _, e := range []string{"0", "1"} {
		if after[e] > before[e] {
			out = append(out, e)
		}
	}
	return strings.Join(out, ",")
}

func TestVLLMDataParallel(t *testing.T) {
	needEngine(t)
	s := startVLLMDP(t, 2)

	// Which of vLLM's endpoints send a request to the engine its
	// X-data-parallel-rank names: each request's prompt is counted by the
	// engine that ran it.
	endpoints := []struct {
		name, path string
		body       func(i int) string
		honoured   bool
	}{
		{"chat completions", "/v1/chat/completions", func(i int) string {
			return chat(msgs("user", words(fmt.Sprintf("chat-%d", i), 40)), "")
		}, true},
		{"completions", "/v1/completions", func(i int) string {
			return `{"model":"` + served + `","prompt":"` + words(fmt.Sprintf("completion-%d", i), 40) + `","max_tokens":2}`
		}, true},
		{"anthropic messages", "/v1/messages", func(i int) string {
			return `{"model":"` + served + `","max_tokens":2,"messages":` + msgs("user", words(fmt.Sprintf("message-%d", i), 40)) + `}`
		}, true},
		{"responses", "/v1/responses", func(i int) string {
			return `{"model":"` + served + `","max_output_tokens":2,"input":"` + words(fmt.Sprintf("response-%d", i), 40) + `"}`
		}, false},
	}
	for _, ep := range endpoints {
		t.Run("rank header on "+ep.name, func(t *testing.T) {
			for _, rank := range []string{"1", "0"} {
				before := s.prompts(t)
				for i := range 4 {
					resp, body := post(t, s.url+ep.path, ep.body(i), "X-data-parallel-rank", rank)
					if resp.StatusCode != 200 {
						t.Fatalf("%s with rank %s: %s %s", ep.path, rank, resp.Status, body)
					}
				}
				got := grew(before, s.prompts(t))
				switch {
				case ep.honoured && got != rank:
					t.Errorf("%s: 4 requests with X-data-parallel-rank %s ran on engines %q, want only %s", ep.path, rank, got, rank)
				case !ep.honoured && got == rank:
					t.Errorf("%s: 4 requests with X-data-parallel-rank %s all ran on engine %s: vLLM now obeys "+
						"the header there; update docs/vllm-dp.md and router.Replica.PinIgnored", ep.path, rank, rank)
				}
			}
		})
	}

	t.Run("route pins each conversation to one engine", func(t *testing.T) { routePins(t, s) })
}

// routePins runs `warden route` in front of s, a server of two engines
// it is to learn, and checks its pinning (checkPins).
func routePins(t *testing.T, s *dpServer) {
	checkPins(t, startWarden(t, nil, "route", "--replica", s.url, "--state-file", "none"), s)
}

// checkPins checks a warden in front of s, a vLLM server of two engines:
// one replica per engine, every turn of a conversation on one engine, and
// the warden's per-replica prompt tokens equal to the engines' own counts.
func checkPins(t *testing.T, w *warden, s *dpServer) {
	st := w.status(t)
	if len(st.Replicas) != 2 || st.Replicas[0].DPRank == nil || st.Replicas[1].DPRank == nil {
		t.Fatalf("route over a --data-parallel-size 2 server: want two replicas pinned to engines 0 and 1, got %+v", st.Replicas)
	}
	engineOf := map[int]string{}
	for _, r := range st.Replicas {
		engineOf[r.Rank] = strconv.Itoa(*r.DPRank)
	}
	before := s.prompts(t)
	// Six conversations of three turns each, half of them Anthropic's.
	for c := range 6 {
		history := []string{"system", words(fmt.Sprintf("conversation %d", c), 120)}
		home := -1
		for turn := range 3 {
			history = append(history, "user", words(fmt.Sprintf("c%d turn %d", c, turn), 30))
			var r *http.Response
			var body string
			if c%2 == 0 {
				r, body = post(t, w.url+"/v1/chat/completions", chat(msgs(history...), ""))
				history = append(history, "assistant", jsonGet(body, "choices.0.message.content").String())
			} else {
				r, body = post(t, w.url+"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":8,"system":`+
					strconv.Quote(history[1])+`,"messages":`+msgs(history[2:]...)+`}`)
				history = append(history, "assistant", jsonGet(body, "content.0.text").String())
			}
			if r.StatusCode != 200 {
				t.Fatalf("conversation %d turn %d: %s %s", c, turn, r.Status, body)
			}
			if got := rankOf(t, r); home < 0 {
				home = got
			} else if got != home {
				t.Errorf("conversation %d turn %d went to replica %d, its home is %d", c, turn, got, home)
			}
		}
	}
	after := s.prompts(t)
	// The warden's table and the engines' own counters agree, engine
	// by engine: every prompt token the warden sent to a replica was
	// counted by that replica's engine.
	eventually(t, 10*time.Second, "the warden's prompt tokens per replica to match the engines' counters", func() bool {
		ok := true
		for _, r := range w.status(t).Replicas {
			e := engineOf[r.Rank]
			if r.PromptTokens != after[e]-before[e] || r.PromptTokens == 0 {
				ok = false
			}
		}
		return ok
	})
	for _, r := range w.status(t).Replicas {
		e := engineOf[r.Rank]
		t.Logf("replica %d (engine %s): %d requests, %.0f prompt tokens, %.0f cached; engine counted %.0f",
			r.Rank, e, r.Requests, r.PromptTokens, r.CachedTokens, after[e]-before[e])
		if r.CachedTokens == 0 {
			t.Errorf("replica %d: no cached prompt tokens over conversations that stayed on it", r.Rank)
		}
	}
}

// Two "nodes" on loopback as vLLM spans several: a head with engine 0 and
// the API server, and a headless process with engine 1 that joins it over
// the data-parallel RPC port. The warden in front of the head's API pins
// both engines, the remote one included.
func TestVLLMDataParallelAcrossTwoNodes(t *testing.T) {
	needEngine(t)
	rpc := []string{"--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", strconv.Itoa(simproc.FreePort(t))}
	head := runVLLMDP(t, 2, 0, 1, false, rpc...)
	runVLLMDP(t, 2, 1, 1, true, rpc...)
	head.waitHealthy(t, 2)
	routePins(t, head)
}

// warden serve --vllm-dp: one vLLM server of two engines started by the
// warden, each rank one of its engines.
func TestServeVLLMDP(t *testing.T) {
	needEngine(t)
	w := startWarden(t, nil, engineArgs(2, "--vllm-dp")...)
	st := w.status(t)
	if len(st.Replicas) != 2 || st.Replicas[0].URL != st.Replicas[1].URL {
		t.Fatalf("serve --vllm-dp --dp 2: want two replicas at one engine URL, got %+v", st.Replicas)
	}
	var servers []string // the `vllm serve` commands under the warden
	for _, p := range tree(int32(w.cmd.Process.Pid)) {
		if strings.Contains(p.cmd, " serve ") && strings.Contains(p.cmd, install.model) {
			servers = append(servers, p.cmd)
		}
	}
	if len(servers) != 1 || !strings.Contains(servers[0], "--data-parallel-size 2") {
		t.Fatalf("want one vllm serve --data-parallel-size 2 under the warden, found %d: %q", len(servers), servers)
	}
	checkPins(t, w, &dpServer{url: st.Replicas[0].URL})
}

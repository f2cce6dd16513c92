package serve

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lmwarden/warden/internal/promtext"
	"github.com/lmwarden/warden/internal/simproc"
)

// serve --vllm-dp on the simulator (which serves --data-parallel-size as
// vLLM does): one engine server, one replica per engine pinned to it, each
// conversation kept on one engine (the engines' own per-engine counters
// agree), and a crash of the one server taking every rank down and back.
func TestServeVLLMDPOneServerPinnedEngines(t *testing.T) {
	w := startServe(t, "--dp", "3", "--vllm-dp", "--", "--sim-time-scale", "50")
	st := w.status(t)
	if len(st.Replicas) != 3 {
		t.Fatalf("%d replicas, want 3", len(st.Replicas))
	}
	engineURL := st.Replicas[0].URL
	for i, r := range st.Replicas {
		if r.URL != engineURL || r.DPRank == nil || *r.DPRank != i || !r.Up {
			t.Fatalf("replica %d: url %s dp_rank %v up %v; want every rank at %s, pinned to engine %d, up", r.Rank, r.URL, r.DPRank, r.Up, engineURL, i)
		}
	}
	engines := simproc.Descendants(int32(w.cmd.Process.Pid))
	if len(engines) != 1 {
		t.Fatalf("want one engine process, found %d: %v", len(engines), engines)
	}
	promptsByEngine := func() map[string]float64 {
		resp, err := http.Get(engineURL + "/metrics")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("engine /metrics: %v %v", resp, err)
		}
		defer resp.Body.Close()
		fams, err := promtext.Parse(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		by, _ := fams.CounterBy("vllm:prompt_tokens", "engine")
		return by
	}
	before := promptsByEngine()
	for c := range 6 {
		home := ""
		history := `{"role":"system","content":"` + strings.Repeat(fmt.Sprintf("conversation %d ", c), 40) + `"}`
		for turn := range 3 {
			history += `,{"role":"user","content":"turn ` + strconv.Itoa(turn) + `"}`
			resp, body := post(t, w.url+"/v1/chat/completions", `{"model":"demo","max_tokens":4,"messages":[`+history+`]}`, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("conversation %d turn %d: %s %s", c, turn, resp.Status, body)
			}
			history += `,{"role":"assistant","content":"ok"}`
			if got := resp.Header.Get("X-Warden-Replica"); home == "" {
				home = got
			} else if got != home {
				t.Errorf("conversation %d turn %d on replica %s, its home is %s", c, turn, got, home)
			}
		}
	}
	after := promptsByEngine()
	simproc.Poll(t, "the warden's prompt tokens per replica to equal its engine's", func() bool {
		for _, r := range w.status(t).Replicas {
			e := strconv.Itoa(*r.DPRank)
			if float64(r.PromptTokens) != after[e]-before[e] {
				return false
			}
		}
		return true
	})

	// The one server dies: every rank leaves the rotation, and comes back
	// with its restart counted.
	if err := syscall.Kill(int(engines[0]), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	simproc.Poll(t, "every rank to be restarted and up again", func() bool {
		for _, r := range w.status(t).Replicas {
			if r.Restarts != 1 || !r.Up {
				return false
			}
		}
		return true
	})
}

package realenvoy_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
)

// picker is one `warden epp` of several, on ports kept across restarts so
// that Envoy's bootstrap names it still.
type picker struct {
	name       string
	grpc, http int
	args       []string // the engines (--replica) and more flags
	cmd        *exec.Cmd
	out        *simproc.SyncBuffer
	readyIn    time.Duration // the last start's time from exec to the ready line
}

func newPicker(t *testing.T, name string, args []string) *picker {
	p := declarePicker(t, name, args)
	p.start(t)
	return p
}

// declarePicker is newPicker without the start.
func declarePicker(t *testing.T, name string, args []string) *picker {
	p := &picker{name: name, grpc: simproc.FreePort(t), http: simproc.FreePort(t), args: args}
	t.Cleanup(func() {
		p.stop(syscall.SIGKILL)
		if t.Failed() && p.out != nil {
			t.Logf("picker %s output:\n%s", p.name, p.out.String())
		}
	})
	return p
}

func (p *picker) grpcAddr() string { return fmt.Sprintf("127.0.0.1:%d", p.grpc) }
func (p *picker) url() string      { return fmt.Sprintf("http://127.0.0.1:%d", p.http) }

// start runs the picker and waits for its ready line (which comes once it
// has replayed the engines' KV events).
func (p *picker) start(t *testing.T) {
	t.Helper()
	if err := p.launch(simproc.Binary(t)); err != nil {
		t.Fatal(err)
	}
}

// launch is start without the test: for a goroutine of the test's.
func (p *picker) launch(bin string) error {
	args := append([]string{"epp", "--grpc-port", strconv.Itoa(p.grpc), "--port", strconv.Itoa(p.http),
		"--scrape-interval", "200ms", "--max-body-bytes", "1MiB"}, p.args...)
	p.cmd = exec.Command(bin, args...)
	p.out = &simproc.SyncBuffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := p.cmd.Start(); err != nil {
		return err
	}
	for !strings.Contains(p.out.String(), "endpoint picker ready") {
		if time.Since(began) > time.Minute {
			return fmt.Errorf("warden epp %s not ready after a minute:\n%s", p.name, p.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.readyIn = time.Since(began)
	return nil
}

// stop signals the picker and reaps it.
func (p *picker) stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(sig)
	p.cmd.Wait()
}

// requests is how many requests the picker has accounted since it started.
func (p *picker) requests(t *testing.T) int64 {
	t.Helper()
	return sum((&farm{eppHTTP: p.url()}).status(t).Get("replicas.#.requests"))
}

// kvSim starts a simulator publishing vLLM's KV-cache events on ipc
// sockets and returns it with its --replica spec naming them.
func kvSim(t *testing.T) (*simproc.Proc, string) {
	dir, err := os.MkdirTemp("", "kv") // short: an ipc path must fit in 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kv, replay := "ipc://"+dir+"/kv.sock", "ipc://"+dir+"/kv-replay.sock"
	s := simproc.Start(t, append(simArgs, "--kv-events-config", fmt.Sprintf(
		`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":%q,"replay_endpoint":%q}`, kv, replay))...)
	return s, s.URL + "#kv=" + kv + "&kv_replay=" + replay
}

// envoyHealthy polls Envoy's admin until it counts exactly the named
// pickers healthy in the picker cluster.
func (f *farm) envoyHealthy(t *testing.T, want ...*picker) {
	t.Helper()
	simproc.Poll(t, "Envoy's picker cluster healthy", func() bool {
		resp, err := http.Get(f.admin + "/clusters")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, p := range want {
			if !strings.Contains(string(b), "warden_epp::"+p.grpcAddr()+"::health_flags::healthy") {
				return false
			}
		}
		return true
	})
}

// TestPickersAgreeThroughEnvoy is issue 43's must-show: two `warden epp`
// pickers behind one real Envoy (envoy-config --epp A --epp B), two
// simulated engines publishing KV events. Eight conversations of five turns
// each keep one engine while Envoy spreads their turns over both pickers,
// across a SIGKILL of one picker (turns go on through the other), its
// restart, and a restart of both (their session tables empty: the homes
// come back from the engines' replayed events). Every turn is answered 200
// and every follow-up turn finds at least 80 % of its prompt cached.
func TestPickersAgreeThroughEnvoy(t *testing.T) {
	needEnvoy(t)
	var replicas []string
	for range 2 {
		_, spec := kvSim(t)
		replicas = append(replicas, "--replica", spec)
	}
	a, b := newPicker(t, "A", replicas), newPicker(t, "B", replicas)
	f := &farm{eppGRPC: a.grpcAddr(), eppHTTP: a.url()}
	f.startEnvoy(t, replicas, []string{"--epp", b.grpcAddr()})
	f.envoyHealthy(t, a, b)
	t.Cleanup(func() {
		if t.Failed() {
			if resp, err := http.Get(f.admin + "/clusters"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("Envoy's clusters:\n%s", b)
			}
		}
	})

	homes := map[string]string{}
	var followUps, cachedTok, promptTok int64
	round := func(n int, when string) {
		t.Helper()
		for c := range 8 {
			session := fmt.Sprintf("agree-%d", c)
			tr := f.agentTurn(t, session, n)
			if tr.status != 200 || tr.replica == "" || !strings.Contains(tr.body, "message_stop") {
				t.Fatalf("%s turn %d (%s): status %d, replica %q\n%s", session, n, when, tr.status, tr.replica, tr.body)
			}
			if n == 1 {
				homes[session] = tr.replica
				continue
			}
			followUps++
			cachedTok += tr.cached
			promptTok += tr.prompt
			if tr.replica != homes[session] {
				t.Errorf("%s turn %d (%s) on engine %s, its home is %s", session, n, when, tr.replica, homes[session])
			}
			if tr.cached*5 < tr.prompt*4 {
				t.Errorf("%s turn %d (%s): %d of %d prompt tokens cached, want at least 80 %%", session, n, when, tr.cached, tr.prompt)
			}
		}
	}
	round(1, "both pickers")
	round(2, "both pickers")
	if na, nb := a.requests(t), b.requests(t); na == 0 || nb == 0 {
		t.Errorf("Envoy sent picks to one picker only: A %d, B %d of 16 turns", na, nb)
	}

	a.stop(syscall.SIGKILL)
	round(3, "picker A killed")
	a.start(t)
	t.Logf("picker A restarted: ready %v after its start (the engines' events replayed)", a.readyIn.Round(time.Millisecond))
	f.envoyHealthy(t, a, b)
	round(4, "picker A restarted")
	if na := a.requests(t); na == 0 {
		t.Errorf("the restarted picker A got no picks of round 4")
	}

	a.stop(syscall.SIGTERM)
	b.stop(syscall.SIGTERM)
	a.start(t)
	b.start(t)
	t.Logf("both restarted: A ready in %v, B in %v", a.readyIn.Round(time.Millisecond), b.readyIn.Round(time.Millisecond))
	f.envoyHealthy(t, a, b)
	round(5, "both pickers restarted")
	if na, nb := a.requests(t), b.requests(t); na == 0 || nb == 0 {
		t.Errorf("after both restarted, Envoy sent picks to one picker only: A %d, B %d of 8 turns", na, nb)
	}
	t.Logf("%d follow-up turns, %d of %d prompt tokens cached (%.1f %%); homes %v", followUps, cachedTok, promptTok,
		100*float64(cachedTok)/float64(promptTok), homes)
}

// agentTurn is a coding agent's streamed /v1/messages turn: a long system
// prompt and tool-sized history, a short new message each turn.
func (f *farm) agentTurn(t *testing.T, session string, n int) turn {
	t.Helper()
	var msgs []string
	for i := range n {
		if i > 0 {
			msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"done with step %d"}`, i))
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"step %d of %s: %s"}`, i, session, strings.Repeat("fix the test ", 8)))
	}
	body := fmt.Sprintf(`{"model":"claude-sonnet-4-5-20250929","max_tokens":16,"stream":true,"system":"You are Claude Code. %s","messages":[%s]}`,
		strings.Repeat("Follow the rules of this repository. ", 120), strings.Join(msgs, ","))
	return f.post(t, "/v1/messages", body, "x-claude-code-session-id", session)
}

// TestPickerStateFileWithoutEvents: engines that publish no KV events
// leave a picker nothing to recover from but its own --state-file: a
// picker stopped and started again sends every conversation's next turn
// to the engine it was on, cached.
func TestPickerStateFileWithoutEvents(t *testing.T) {
	needEnvoy(t)
	var replicas []string
	for range 2 {
		replicas = append(replicas, "--replica", simproc.Start(t, simArgs...).URL)
	}
	state := t.TempDir() + "/sessions.json"
	p := newPicker(t, "A", append([]string{"--state-file", state}, replicas...))
	f := &farm{eppGRPC: p.grpcAddr(), eppHTTP: p.url()}
	f.startEnvoy(t, replicas, nil)
	homes := map[string]string{}
	for c := range 8 {
		session := fmt.Sprintf("state-%d", c)
		if tr := f.agentTurn(t, session, 1); tr.status != 200 || tr.replica == "" {
			t.Fatalf("%s: status %d, replica %q", session, tr.status, tr.replica)
		} else {
			homes[session] = tr.replica
		}
	}
	p.stop(syscall.SIGTERM)
	if !strings.Contains(p.out.String(), "session table saved") {
		t.Fatalf("the picker did not say it saved its session table:\n%s", p.out.String())
	}
	p.start(t)
	f.envoyHealthy(t, p)
	for c := range 8 {
		session := fmt.Sprintf("state-%d", c)
		tr := f.agentTurn(t, session, 2)
		if tr.status != 200 || tr.replica != homes[session] || tr.cached*5 < tr.prompt*4 {
			t.Errorf("%s after the restart: status %d on %q (home %s), %d of %d cached", session, tr.status, tr.replica,
				homes[session], tr.cached, tr.prompt)
		}
	}
}

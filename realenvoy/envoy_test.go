package realenvoy_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/tidwall/gjson"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lmwarden/warden/epp"
	"github.com/lmwarden/warden/internal/simproc"
)

// TestConversationsKeepTheirEndpointThroughEnvoy: six Claude-Code-like
// conversations of three turns each, through real Envoy and the warden's
// picker over four engines, keep their endpoint turn after turn and find
// their prefix cached from the second turn on; the picker says SERVING on
// its gRPC health services and accounts every turn.
func TestConversationsKeepTheirEndpointThroughEnvoy(t *testing.T) {
	f := newFarm(t, 4)
	for _, svc := range []string{"liveness", "readiness", epp.ServiceName} {
		if got := f.health(t, svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %q: %v, want SERVING", svc, got)
		}
	}
	homes := map[string]string{}
	for n := 1; n <= 3; n++ {
		for c := range 6 {
			session := fmt.Sprintf("cc-%d", c)
			tr := f.claudeTurn(t, session, n)
			if tr.status != 200 || tr.replica == "" {
				t.Fatalf("%s turn %d: status %d, replica %q\n%s", session, n, tr.status, tr.replica, tr.body)
			}
			if n == 1 {
				homes[session] = tr.replica
				continue
			}
			if tr.replica != homes[session] || tr.route != "sticky" {
				t.Errorf("%s turn %d on replica %s (%s), its home is %s", session, n, tr.replica, tr.route, homes[session])
			}
			if tr.cached <= 0 || tr.cached >= tr.prompt {
				t.Errorf("%s turn %d: %d of %d prompt tokens cached, want the earlier turns' prefix", session, n, tr.cached, tr.prompt)
			}
		}
	}
	spread := map[string]bool{}
	for _, h := range homes {
		spread[h] = true
	}
	if len(spread) < 3 {
		t.Errorf("six new conversations on %d of 4 endpoints: %v; want them spread by load", len(spread), homes)
	}
	simproc.Poll(t, "every turn accounted", func() bool {
		st := f.status(t)
		return st.Get("in_flight").Int() == 0 && sum(st.Get("replicas.#.requests")) == 18
	})
	st := f.status(t)
	if got := st.Get("sticky_share").Float(); got != 1 {
		t.Errorf("the picker's sticky share %v, want 1", got)
	}
	if c := sum(st.Get("replicas.#.cached_tokens")); c <= 0 {
		t.Errorf("the picker counted %d cached prompt tokens, want the engines' reports", c)
	}
}

func sum(r gjson.Result) (n int64) {
	for _, v := range r.Array() {
		n += v.Int()
	}
	return n
}

// TestEngineKilledMidRunLosesNoConversation: an engine SIGKILLed between
// turns: every later turn of every conversation is answered (Envoy retries
// the picker's fallback until the picker sees the engine gone), and the
// conversations that lived there settle on a new endpoint.
func TestEngineKilledMidRunLosesNoConversation(t *testing.T) {
	f := newFarm(t, 3)
	homes := map[string]string{}
	for c := range 6 {
		session := fmt.Sprintf("k-%d", c)
		tr := f.claudeTurn(t, session, 1)
		if tr.status != 200 {
			t.Fatalf("%s: %d", session, tr.status)
		}
		homes[session] = tr.replica
	}
	victim := homes["k-0"]
	rank := int(victim[0] - '0')
	f.sims[rank].Kill()
	for n := 2; n <= 4; n++ {
		for c := range 6 {
			session := fmt.Sprintf("k-%d", c)
			tr := f.claudeTurn(t, session, n)
			if tr.status != 200 || !strings.Contains(tr.body, "message_stop") {
				t.Fatalf("%s turn %d after replica %s was killed: status %d\n%s", session, n, victim, tr.status, tr.body)
			}
			if tr.replica == victim {
				t.Errorf("%s turn %d accounted on the killed replica %s", session, n, victim)
			}
			if homes[session] != victim && tr.replica != homes[session] {
				t.Errorf("%s (home %s, alive) moved to %s", session, homes[session], tr.replica)
			}
		}
	}
}

// TestPickerKilledFailOpen and ...FailClosed: the bootstrap's choice when
// the picker is gone: requests go on without stickiness, or get 500.
func TestPickerKilledFailOpen(t *testing.T) {
	f := newFarm(t, 2, "--fail-open")
	for n := 1; n <= 2; n++ { // buffered bodies: the picker still picks and sticks
		if tr := f.claudeTurn(t, "fo", n); tr.status != 200 || tr.replica == "" || (n == 2 && tr.route != "sticky") {
			t.Fatalf("with the picker, turn %d: %d %q %s", n, tr.status, tr.replica, tr.route)
		}
	}
	if tr := f.claudeTurn(t, "fo", 3); tr.status != 200 || tr.replica == "" {
		t.Fatalf("with the picker: %d %q", tr.status, tr.replica)
	}
	f.epp.Process.Signal(syscall.SIGKILL)
	f.epp.Wait()
	f.model = "test-model" // without the picker no name is mapped either: the engines' own
	for n := 4; n <= 5; n++ {
		tr := f.claudeTurn(t, "fo", n)
		if tr.status != 200 || tr.replica != "" {
			t.Errorf("fail-open, picker gone, turn %d: status %d, replica %q; want 200 without a pick", n, tr.status, tr.replica)
		}
	}
}

func TestPickerKilledFailClosed(t *testing.T) {
	f := newFarm(t, 2)
	if tr := f.claudeTurn(t, "fc", 1); tr.status != 200 {
		t.Fatalf("with the picker: %d", tr.status)
	}
	f.epp.Process.Signal(syscall.SIGKILL)
	f.epp.Wait()
	if tr := f.claudeTurn(t, "fc", 2); tr.status != 500 {
		t.Errorf("fail-closed, picker gone: status %d, want 500", tr.status)
	}
}

// TestEngineNotAnsweringHealthLeavesThePicks: an engine that stops
// answering (SIGSTOP) leaves the picks once its health check fails; new
// conversations all go to the other; back after SIGCONT.
func TestEngineNotAnsweringHealthLeavesThePicks(t *testing.T) {
	f := newFarm(t, 2)
	stopped := f.sims[0]
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer stopped.Signal(syscall.SIGCONT)
	simproc.Poll(t, "the stopped engine out of rotation", func() bool {
		return !f.status(t).Get("replicas.0.up").Bool()
	})
	for c := range 4 {
		if tr := f.claudeTurn(t, fmt.Sprintf("h-%d", c), 1); tr.status != 200 || tr.replica != "1" {
			t.Errorf("new conversation %d with engine 0 stopped: status %d on replica %q, want 200 on 1", c, tr.status, tr.replica)
		}
	}
	stopped.Signal(syscall.SIGCONT)
	simproc.Poll(t, "the engine back in rotation", func() bool { return f.status(t).Get("replicas.0.up").Bool() })
}

// TestBadInputThroughEnvoy: a body that is not JSON reaches an engine and
// its 4xx comes back; a body over the picker's limit gets the picker's 413
// in the API's shape; the picker goes on serving.
func TestBadInputThroughEnvoy(t *testing.T) {
	f := newFarm(t, 2)
	if tr := f.post(t, "/v1/chat/completions", `{"model": "test-model", "messages": [`); tr.status < 400 || tr.status >= 500 {
		t.Errorf("malformed JSON: status %d, want a 4xx\n%s", tr.status, tr.body)
	}
	huge := `{"model":"test-model","messages":[{"role":"user","content":"` + strings.Repeat("x", 2<<20) + `"}]}`
	tr := f.post(t, "/v1/messages", huge, "x-claude-code-session-id", "big")
	if tr.status != 413 || gjson.Get(tr.body, "type").Str != "error" || !strings.Contains(gjson.Get(tr.body, "error.message").Str, "--max-body-bytes") {
		t.Errorf("a 2 MiB body over the 1 MiB limit: status %d %s; want 413 in Anthropic's shape naming the flag", tr.status, tr.body)
	}
	if tr := f.claudeTurn(t, "after", 1); tr.status != 200 || !f.pickerReady() {
		t.Errorf("after bad input: status %d, picker ready %v", tr.status, f.pickerReady())
	}
}

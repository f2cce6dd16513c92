package admin_test

// The admin endpoints as clients reach them: over real HTTP, mounted by
// the HTTP data plane in front of a router core and fake engines
// (http_fixture_test.go).

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
)

func TestPolicyEndpoint(t *testing.T) {
	e := newFakeEngine(t)
	p, front := testProxy(t, testConfig{}, e)
	post(t, front.URL+"/v1/chat/completions", chatBody("kept", false, ""))
	resp, body := post(t, front.URL+"/warden/policy", `{"policy":"off"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"previous": "adaptive"`) {
		t.Fatalf("switch: %d %s", resp.StatusCode, body)
	}
	g, err := http.Get(front.URL + "/warden/policy")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Policy string }
	json.NewDecoder(g.Body).Decode(&got)
	g.Body.Close()
	if got.Policy != "off" || coreOf(p).Status().Policy != "off" || coreOf(p).Status().Affinity {
		t.Errorf("GET policy = %q, status %q", got.Policy, coreOf(p).Status().Policy)
	}
	if coreOf(p).Status().Sessions != 1 {
		t.Error("switching dropped the session table")
	}
	resp, body = post(t, front.URL+"/warden/policy", `{"policy":"fastest"}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "sticky") {
		t.Errorf("unknown policy: %d %s", resp.StatusCode, body)
	}
	resp, _ = post(t, front.URL+"/warden/policy", `not json`)
	if resp.StatusCode != 400 {
		t.Errorf("bad body: %d", resp.StatusCode)
	}
}

func TestResetPrefixCacheReachesEveryReplica(t *testing.T) {
	e0, e1 := newFakeEngine(t), newFakeEngine(t)
	_, front := testProxy(t, testConfig{}, e0, e1)
	resp, body := post(t, front.URL+"/warden/reset_prefix_cache", "")
	if resp.StatusCode != 200 || e0.resets != 1 || e1.resets != 1 {
		t.Errorf("status %d resets %d %d: %s", resp.StatusCode, e0.resets, e1.resets, body)
	}
	e1.srv.Close()
	resp, body = post(t, front.URL+"/warden/reset_prefix_cache", "")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"rank": 1`) {
		t.Errorf("with replica 1 down: %d %s", resp.StatusCode, body)
	}
}

func TestOwnEndpoints(t *testing.T) {
	e := newFakeEngine(t)
	p, front := testProxy(t, testConfig{Config: router.Config{ServedModel: "qwen"}}, e)
	get := func(path string) (int, string) {
		resp, err := http.Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/v1/models"); code != 200 || !strings.Contains(body, `"id":"qwen"`) {
		t.Errorf("/v1/models: %d %s", code, body)
	}
	if code, _ := get("/health"); code != 200 {
		t.Errorf("/health with a healthy replica: %d", code)
	}
	coreOf(p).SetStarting(true) // warden serve: the other engines still load
	if code, body := get("/health"); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("/health while the engines start: %d %s, want 503", code, body)
	}
	coreOf(p).SetStarting(false)
	if code, body := get("/warden/status"); code != 200 || !strings.Contains(body, `"policy": "adaptive"`) {
		t.Errorf("/warden/status: %d %s", code, body)
	}
	if code, body := get("/"); code != 200 || !strings.Contains(body, "<html") {
		t.Errorf("/: %d %.200s", code, body)
	}
	coreOf(p).SetReplicaState(0, false, "restarting", "exited 1")
	if code, _ := get("/health"); code != 503 {
		t.Errorf("/health with no healthy replica: %d", code)
	}
	resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("s", false, ""))
	if resp.StatusCode != 503 || !strings.Contains(body, "no replica") {
		t.Errorf("request with no replica: %d %s", resp.StatusCode, body)
	}
}

func TestMetricsAreLintCleanAndCount(t *testing.T) {
	e := newFakeEngine(t)
	reg := prometheus.NewPedanticRegistry()
	p, front := testProxy(t, testConfig{Config: router.Config{Registry: reg}}, e)
	post(t, front.URL+"/v1/chat/completions", chatBody("s", true, ""))
	post(t, front.URL+"/v1/chat/completions", chatBody("s", true, ""))
	settled(t, p)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
	if got, _ := metric(t, reg, "warden_requests_total", "replica", "0", "route", "sticky"); got != 1 {
		t.Errorf("sticky requests = %v, want 1", got)
	}
	if got, _ := metric(t, reg, "warden_cached_prompt_tokens_total", "replica", "0"); got != 128 {
		t.Errorf("cached tokens = %v, want 128", got)
	}
	if _, n := metric(t, reg, "warden_time_to_first_byte_seconds"); n != 1 {
		t.Errorf("ttfb series = %d, want 1", n)
	}
}

// The adaptive policy's knobs travel from Config to every decision and are
// shown on GET /warden/policy; out-of-range values are refused by New.
func TestAdaptiveKnobs(t *testing.T) {
	e := newFakeEngine(t)
	p, front := testProxy(t, testConfig{Config: router.Config{AdmitWait: -time.Second, MoveCooldown: 5, KVFill: 0.8}}, e)
	pc := coreOf(p).Placer().Config()
	if pc.AdmitWait >= 0 || pc.MoveCooldown != 5 || pc.Fill != 0.8 || pc.Policy != place.PolicyAdaptive {
		t.Errorf("placeConfig = %+v, want never-wait, cooldown 5, fill 0.8, adaptive", pc)
	}
	g, err := http.Get(front.URL + "/warden/policy")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		AdmitWait    float64 `json:"admit_wait_s"`
		AdmitAuto    bool    `json:"admit_wait_auto"`
		MoveCooldown int     `json:"move_cooldown_turns"`
		KVFill       float64 `json:"kv_fill"`
	}
	json.NewDecoder(g.Body).Decode(&got)
	g.Body.Close()
	if got.AdmitWait != -1 || got.AdmitAuto || got.MoveCooldown != 5 || got.KVFill != 0.8 {
		t.Errorf("GET /warden/policy knobs = %+v", got)
	}

	_, auto := testProxy(t, testConfig{Config: router.Config{AdmitWait: 90 * time.Second}}, newFakeEngine(t))
	g, err = http.Get(auto.URL + "/warden/policy")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(g.Body).Decode(&got)
	g.Body.Close()
	if got.AdmitWait != 90 || got.AdmitAuto || got.MoveCooldown != place.DefaultMoveCooldown || got.KVFill != place.DefaultFill {
		t.Errorf("defaults with a 90 s admit wait: %+v", got)
	}

	for _, cfg := range []testConfig{{Config: router.Config{MoveCooldown: -1}}, {Config: router.Config{KVFill: 4.5}}, {Config: router.Config{KVFill: -0.1}}} {
		if _, err := newProxy(cfg, []router.Backend{{Rank: 0, URL: e.srv.URL, MaxNumSeqs: 32}}); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestResetWithoutDevModeSaysHowToEnableIt(t *testing.T) {
	e := httptest.NewServer(http.NotFoundHandler()) // vLLM outside dev mode: no /reset_prefix_cache
	defer e.Close()
	_, front := testProxyBackends(t, testConfig{}, []router.Backend{{Rank: 0, URL: e.URL, MaxNumSeqs: 8}})
	resp, body := post(t, front.URL+"/warden/reset_prefix_cache", "")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "VLLM_SERVER_DEV_MODE=1") {
		t.Errorf("reset on an engine without the route: %d %s", resp.StatusCode, body)
	}
}

func TestAdminNeedsLoopbackOrTheToken(t *testing.T) {
	p, err := newProxy(testConfig{Config: router.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, Proxy: proxy.Config{AdminToken: "adm1n"}},
		[]router.Backend{{Rank: 0, URL: "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		remote, auth string
		want         int
	}{
		{"127.0.0.1:5000", "", 200},
		{"[::1]:5000", "", 200},
		{"192.0.2.7:5000", "", 403},
		{"192.0.2.7:5000", "Bearer wrong", 403},
		{"192.0.2.7:5000", "Bearer adm1n", 200},
		{"127.0.0.1:5000", "Bearer wrong", 403}, // a wrong token is refused even from loopback
		{"[2001:db8::1]:5000", "", 403},
		{"garbage", "", 403},
	} {
		req := httptest.NewRequest(http.MethodPost, "/warden/policy", strings.NewReader(`{"policy":"sticky"}`))
		req.RemoteAddr = c.remote
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		p.Handler().ServeHTTP(w, req)
		if w.Code != c.want {
			t.Errorf("from %s with %q: status %d, want %d: %s", c.remote, c.auth, w.Code, c.want, w.Body)
		}
	}
}

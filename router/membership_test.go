package router_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/place/placetest"
)

func TestParseReplica(t *testing.T) {
	for _, tc := range []struct {
		in, url string
		seqs    int
		err     string
	}{
		{in: "http://10.0.0.5:8000", url: "http://10.0.0.5:8000"},
		{in: " HTTP://Host.Example:8000/ ", url: "http://host.example:8000"},
		{in: "https://gpu-box/vllm/#max_num_seqs=64", url: "https://gpu-box/vllm", seqs: 64},
		{in: "http://h:1#max-num-seqs=8", url: "http://h:1", seqs: 8},
		{in: "10.0.0.5:8000", err: "want an http(s) URL"},
		{in: "ftp://h:1", err: "want an http(s) URL"},
		{in: "http://:8000", err: "want an http(s) URL"},
		{in: "", err: "want an http(s) URL"},
		{in: "http://h:1?x=1", err: "no query"},
		{in: "http://u:p@h:1", err: "no query or user info"},
		{in: "http://h:1#max_num_seqs=0", err: "positive integer"},
		{in: "http://h:1#max_num_seqs=lots", err: "positive integer"},
		{in: "http://h:1#gpus=2", err: `unknown setting "gpus"`},
	} {
		b, err := router.ParseReplica(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("router.ParseReplica(%q) error %v, want one containing %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("router.ParseReplica(%q): %v", tc.in, err)
		case tc.err == "" && (b.URL != tc.url || b.MaxNumSeqs != tc.seqs):
			t.Errorf("router.ParseReplica(%q) = %s seqs %d, want %s seqs %d", tc.in, b.URL, b.MaxNumSeqs, tc.url, tc.seqs)
		}
	}
}

// adminCall sends an admin request with a JSON body (or none) and decodes
// the JSON answer.
func adminCall(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// homes sends one turn of each session and returns the rank it went to and
// the route reason.
func homes(t *testing.T, front string, sessions []string) (map[string]string, map[string]string) {
	t.Helper()
	rank, route := map[string]string{}, map[string]string{}
	for _, s := range sessions {
		resp, body := post(t, front+"/v1/chat/completions", chatBody(s, false, ""))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("session %s: %d %s", s, resp.StatusCode, body)
		}
		rank[s], route[s] = resp.Header.Get(identity.PinHeader), resp.Header.Get(routeHeader)
	}
	return rank, route
}

func TestReplicasAddedAndRemovedAtRunTimeKeepTheSessionTable(t *testing.T) {
	e0, e1, e2 := newFakeEngine(t), newFakeEngine(t), newFakeEngine(t)
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicySticky}}, e0, e1)
	sessions := []string{"a", "b", "c", "d", "e", "f"}
	home, _ := homes(t, front.URL, sessions)

	code, added := adminCall(t, http.MethodPost, front.URL+"/warden/replicas", `{"url":"`+e2.srv.URL+`#max_num_seqs=12"}`)
	if code != http.StatusCreated || added["rank"] != 2.0 || added["max_num_seqs"] != 12.0 {
		t.Fatalf("add: %d %v", code, added)
	}
	simproc.Poll(t, "the added replica in rotation", func() bool { r := coreOf(p).Lookup(2); return r != nil && r.Healthy() })
	if code, _ := adminCall(t, http.MethodPost, front.URL+"/warden/replicas", `{"url":"`+e2.srv.URL+`/"}`); code != http.StatusConflict {
		t.Errorf("adding the same URL again: %d, want 409", code)
	}

	onZero := 0
	for _, s := range sessions {
		if home[s] == "0" {
			onZero++
		}
	}
	if onZero == 0 || onZero == len(sessions) {
		t.Fatalf("placement put %d of %d sessions on replica 0; the test needs both replicas used", onZero, len(sessions))
	}
	code, removed := adminCall(t, http.MethodDelete, front.URL+"/warden/replicas?url="+e0.srv.URL, "")
	if code != http.StatusOK || removed["rank"] != 0.0 || removed["sessions"] != float64(onZero) {
		t.Fatalf("remove: %d %v (want rank 0 with %d sessions)", code, removed, onZero)
	}
	if n := coreOf(p).Status().Sessions; n != len(sessions) {
		t.Errorf("sessions after removal = %d, want %d (table kept)", n, len(sessions))
	}
	rank, route := homes(t, front.URL, sessions)
	for _, s := range sessions {
		want := "sticky"
		if home[s] == "0" {
			want = "failover"
		}
		if route[s] != want || rank[s] == "0" {
			t.Errorf("session %s (home %s): went to %s as %s, want %s off replica 0", s, home[s], rank[s], route[s], want)
		}
	}
	if code, _ := adminCall(t, http.MethodDelete, front.URL+"/warden/replicas", `{"rank":0}`); code != http.StatusNotFound {
		t.Errorf("removing it twice: %d, want 404", code)
	}
	code, back := adminCall(t, http.MethodPost, front.URL+"/warden/replicas", `{"url":"`+e0.srv.URL+`"}`)
	if code != http.StatusCreated || back["rank"] != 0.0 {
		t.Errorf("re-adding the removed URL: %d %v, want its old rank 0", code, back)
	}
}

func TestReplicaAdminNeedsLoopbackOrTokenAndGoodInput(t *testing.T) {
	e0 := newFakeEngine(t)
	p, front := testProxy(t, testConfig{Proxy: proxy.Config{AdminToken: "sesame"}}, e0)
	for _, tc := range []struct {
		method, body, remote, token string
		want                        int
	}{
		{http.MethodPost, `{"url":"http://10.1.1.1:8000"}`, "10.0.0.9:4444", "", http.StatusForbidden},
		{http.MethodDelete, `{"rank":0}`, "10.0.0.9:4444", "wrong", http.StatusForbidden},
		{http.MethodPost, `{"url":"http://10.1.1.1:8000"}`, "10.0.0.9:4444", "sesame", http.StatusCreated},
		{http.MethodPost, `not json`, "127.0.0.1:1", "", http.StatusBadRequest},
		{http.MethodPost, `{"url":"gpu-box:8000"}`, "127.0.0.1:1", "", http.StatusBadRequest},
		{http.MethodPost, `{"url":"http://h:1","max_num_seqs":-1}`, "127.0.0.1:1", "", http.StatusBadRequest},
		{http.MethodDelete, `{}`, "127.0.0.1:1", "", http.StatusBadRequest},
		{http.MethodDelete, `{"url":"http://nowhere:1"}`, "127.0.0.1:1", "", http.StatusNotFound},
	} {
		req := httptest.NewRequest(tc.method, "/warden/replicas", strings.NewReader(tc.body))
		req.RemoteAddr = tc.remote
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		w := httptest.NewRecorder()
		p.Handler().ServeHTTP(w, req)
		if w.Code != tc.want || !json.Valid(w.Body.Bytes()) {
			t.Errorf("%s %s from %s: %d %s, want %d", tc.method, tc.body, tc.remote, w.Code, w.Body, tc.want)
		}
	}
	code, list := adminCall(t, http.MethodGet, front.URL+"/warden/replicas", "")
	if reps, _ := list["replicas"].([]any); code != http.StatusOK || len(reps) != 2 {
		t.Errorf("GET /warden/replicas: %d %v, want 2 replicas", code, list)
	}
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

func TestProbedReplicaEntersRotationOnlyOnceItAnswers(t *testing.T) {
	e0 := newFakeEngine(t)
	p, front := testProxyBackends(t, testConfig{Config: router.Config{Policy: place.PolicySticky}}, []router.Backend{
		{Rank: 0, URL: e0.srv.URL, Probe: true, FallbackMaxNumSeqs: 32},
		{Rank: 1, URL: closedURL(t), Probe: true, FallbackMaxNumSeqs: 32},
	})
	if resp, body := post(t, front.URL+"/v1/chat/completions", chatBody("x", false, "")); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("before any health check: %d %s, want 503 (no replica known to be up)", resp.StatusCode, body)
	}
	coreOf(p).CheckNow(context.Background())
	up := map[int]bool{}
	for _, r := range coreOf(p).Status().Replicas {
		up[r.Rank] = r.Up
	}
	if diff := cmp.Diff(map[int]bool{0: true, 1: false}, up); diff != "" {
		t.Errorf("up after one check (-want +got):\n%s", diff)
	}
	for i := range 5 {
		resp, _ := post(t, front.URL+"/v1/chat/completions", chatBody("s"+strconv.Itoa(i), false, ""))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(identity.PinHeader) != "0" {
			t.Errorf("session %d: %d on replica %s, want 200 on 0", i, resp.StatusCode, resp.Header.Get(identity.PinHeader))
		}
	}
}

// configServer answers one max_num_seqs source (path -> body) and /health,
// /metrics like an engine.
func configServer(t *testing.T, path, body string) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, metricsText(0, 0, 0, 0, 0)) })
	if path != "" {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestMaxNumSeqsLearnedFromTheServerElseTheFallback(t *testing.T) {
	urls := []string{
		configServer(t, "/inference/v1/config", `{"scheduler":{"max_num_seqs":48,"max_num_batched_tokens":8192}}`),
		configServer(t, "/server_info", `{"vllm_config":{"scheduler_config":{"max_num_seqs":96}},"vllm_env":{}}`),
		configServer(t, "/server_info", `{"vllm_config":"model='m', scheduler_config=SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=128)"}`),
		configServer(t, "", ""),
		configServer(t, "/inference/v1/config", `{"scheduler":{"max_num_seqs":48}}`),
	}
	bs := []router.Backend{
		{Rank: 0, URL: urls[0], Probe: true, FallbackMaxNumSeqs: 20},
		{Rank: 1, URL: urls[1], Probe: true, FallbackMaxNumSeqs: 20},
		{Rank: 2, URL: urls[2], Probe: true, FallbackMaxNumSeqs: 20},
		{Rank: 3, URL: urls[3], Probe: true, FallbackMaxNumSeqs: 20},
		{Rank: 4, URL: urls[4], Probe: true, FallbackMaxNumSeqs: 20, MaxNumSeqs: 12}, // the user said: no asking
	}
	p, _ := testProxyBackends(t, testConfig{}, bs)
	coreOf(p).CheckNow(context.Background())
	var got []int
	for _, r := range coreOf(p).Status().Replicas {
		got = append(got, r.MaxNumSeqs)
	}
	if diff := cmp.Diff([]int{48, 96, 128, 20, 12}, got); diff != "" {
		t.Errorf("max_num_seqs per replica (-want +got):\n%s", diff)
	}
}

func TestSpillUsesEachReplicasOwnCapacity(t *testing.T) {
	snap := []place.ReplicaView{
		{Rank: 0, Healthy: true, InFlight: 3, MaxNumSeqs: 8},  // spill above 2
		{Rank: 1, Healthy: true, InFlight: 3, MaxNumSeqs: 64}, // spill above 16
		{Rank: 2, Healthy: true, InFlight: 0, MaxNumSeqs: 8},
	}
	cfg := place.Config{Policy: place.PolicySticky}
	for home, want := range map[int]place.Decision{0: {Rank: 2, Reason: place.ReasonSpill}, 1: {Rank: 1, Reason: place.ReasonSticky}} {
		got := place.Pick(snap, place.SessionView{Key: "k", Known: true, Home: home}, cfg, placetest.FixedRand(0))
		if got != want {
			t.Errorf("home %d (max_num_seqs %d, 3 in flight): %+v, want %+v", home, snap[home].MaxNumSeqs, got, want)
		}
	}
}

func TestReplicaChangesDuringTrafficLoseNoRequest(t *testing.T) {
	e0, e1, e2 := newFakeEngine(t), newFakeEngine(t), newFakeEngine(t)
	p, front := testProxy(t, testConfig{Config: router.Config{Policy: place.PolicySticky}}, e0, e1, e2)
	stop := make(chan struct{})
	errs := make(chan string, 100)
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := chatBody("c"+strconv.Itoa(c)+"-"+strconv.Itoa(i%5), false, "")
				resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err.Error()
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- resp.Status
					return
				}
			}
		}()
	}
	served := func() uint64 { return coreOf(p).Status().Totals.Requests }
	for range 30 { // replica 2 leaves and comes back while turns flow
		before := served()
		if _, err := coreOf(p).RemoveReplica(e2.srv.URL, -1); err != nil {
			t.Fatal(err)
		}
		simproc.Poll(t, "turns served while a replica is out", func() bool { return served() > before+2 })
		if _, err := coreOf(p).AddReplica(router.Backend{URL: e2.srv.URL, MaxNumSeqs: 32}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a request failed during replica changes: %s", e)
	}
	settled(t, p)
	if n := len(coreOf(p).Replicas()); n != 3 || coreOf(p).Lookup(2) == nil {
		t.Errorf("after the changes: %d replicas, rank 2 present %v", n, coreOf(p).Lookup(2) != nil)
	}
}

func TestAWardenAsAReplicaReportsItsEnginesSummed(t *testing.T) {
	e0, e1 := newFakeEngine(t), newFakeEngine(t)
	e0.metrics.Store(metricsText(3, 1, 0.5, 100, 50))
	e1.metrics.Store(metricsText(1, 0, 0.25, 300, 30))
	inner, innerFront := testProxy(t, testConfig{}, e0, e1) // each max_num_seqs 32, KV 40,000 tokens
	coreOf(inner).CheckNow(context.Background())
	outer, _ := testProxyBackends(t, testConfig{}, []router.Backend{{Rank: 0, URL: innerFront.URL, Probe: true, FallbackMaxNumSeqs: 256}})
	coreOf(outer).CheckNow(context.Background())
	e0.metrics.Store(metricsText(3, 1, 0.5, 180, 110)) // +80 queries, +60 hits
	coreOf(inner).CheckNow(context.Background())
	coreOf(outer).CheckNow(context.Background())
	r := coreOf(outer).Status().Replicas[0]
	got := []float64{float64(r.MaxNumSeqs), r.Running, r.Waiting, r.KVUsed, float64(r.KVCapacityTokens), r.PrefixQueries, r.PrefixHits}
	if diff := cmp.Diff([]float64{64, 4, 1, 0.375, 80000, 80, 60}, got); diff != "" || !r.Up {
		t.Errorf("a warden seen as one replica: up %v; max_num_seqs, running, waiting, KV used, KV capacity, prefix queries, hits (-want +got):\n%s", r.Up, diff)
	}
}

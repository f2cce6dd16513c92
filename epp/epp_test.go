package epp

// The picker's protocol tests: a gRPC client plays the gateway's side of
// ext_proc over loopback against a Server over a router core of fake
// engines (their /health and /metrics only: the gateway, not the picker,
// carries the bytes). The real gateway's tests are in realenvoy/.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
)

// healthyEngine answers /health and a minimal vLLM /metrics.
func healthyEngine(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type rig struct {
	core   *router.Core
	client extprocv3.ExternalProcessorClient
	conn   *grpc.ClientConn
	eps    []string // the engines' ip:port, by rank
}

// newRig is a picker over n fake engines (checked once: in rotation),
// served on a loopback gRPC port; the core's settings are cc's, its policy
// sticky.
func newRig(t *testing.T, n int, cc router.Config, cfg Config) *rig {
	t.Helper()
	var bs []router.Backend
	r := &rig{}
	for i := range n {
		e := healthyEngine(t)
		bs = append(bs, router.Backend{Rank: i, URL: e.URL, MaxNumSeqs: 32})
		r.eps = append(r.eps, strings.TrimPrefix(e.URL, "http://"))
	}
	cc.Policy, cc.Logger = place.PolicySticky, slog.New(slog.DiscardHandler)
	core, err := router.New(cc, bs)
	if err != nil {
		t.Fatal(err)
	}
	core.CheckNow(context.Background())
	s, err := New(core, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.core, r.client, r.conn = core, extprocv3.NewExternalProcessorClient(conn), conn
	return r
}

func headers(kv ...string) *extprocv3.HttpHeaders {
	var hs []*corev3.HeaderValue
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}}
}

// exchange is one request as the gateway sends it in full-duplex mode:
// headers, the body in two chunks; it returns the picker's answers up to
// the body's end (or an immediate answer).
func (r *rig) request(t *testing.T, md *corev3.Metadata, body string, kv ...string) (extprocv3.ExternalProcessor_ProcessClient, []*extprocv3.ProcessingResponse) {
	t.Helper()
	st, err := r.client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := headers(append([]string{":method", "POST", ":path", "/v1/chat/completions"}, kv...)...)
	send := func(req *extprocv3.ProcessingRequest) {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}, MetadataContext: md})
	half := len(body) / 2
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body[:half])}}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body[half:]), EndOfStream: true}}})
	var out []*extprocv3.ProcessingResponse
	for {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp)
		if resp.GetImmediateResponse() != nil {
			return st, out
		}
		if sb := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse(); sb != nil && sb.EndOfStream {
			return st, out
		}
	}
}

// pick is the endpoints the picker named, from the header and from the
// metadata (they must be equal), and the body it handed back.
func pick(t *testing.T, out []*extprocv3.ProcessingResponse) (eps, body string) {
	t.Helper()
	hr := out[0].GetRequestHeaders()
	if hr == nil {
		t.Fatalf("first answer is not the headers' answer: %v", out[0])
	}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == DestinationHeader {
			eps = string(h.GetHeader().GetRawValue())
		}
	}
	md := out[0].GetDynamicMetadata().GetFields()[LBNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	if eps == "" || md != eps {
		t.Fatalf("header %q and envoy.lb metadata %q must name the same endpoints", eps, md)
	}
	for _, r := range out[1:] {
		body += string(r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	return eps, body
}

// answer plays the engine's answer back through the picker: headers with
// the served endpoint, an SSE stream in chunks with usage at its end.
func answer(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient, served string, prompt, cached int) http.Header {
	t.Helper()
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{LBNamespace: {Fields: map[string]*structpb.Value{
		ServedKey: structpb.NewStringValue(served)}}}}
	st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream")}, MetadataContext: md})
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := http.Header{}
	for _, h := range resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		got.Set(h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()))
	}
	chunks := []string{`data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n",
		fmt.Sprintf(`data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\ndata: [DONE]\n\n", prompt, cached)}
	for i, c := range chunks {
		st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(c), EndOfStream: i == len(chunks)-1}}})
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		// The usage chunk the picker asked for (chat has no include_usage)
		// is read, and not handed on to the client, as serve does.
		want := c
		if i == 1 {
			want = "data: [DONE]\n\n"
		}
		if sb := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); string(sb.GetBody()) != want {
			t.Fatalf("answer chunk %d handed back as %q, want %q", i, sb.GetBody(), want)
		}
	}
	st.CloseSend()
	return got
}

const chat = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`

// TestPickSticksAndAccounts: a conversation's turns are picked onto one
// endpoint (header = metadata, a fallback after it), the body comes back
// unchanged, and the answer's usage lands on the replica that served it.
func TestPickSticksAndAccounts(t *testing.T) {
	r := newRig(t, 2, router.Config{}, Config{Fallbacks: DefaultFallbacks})
	var home string
	for turn := range 3 {
		st, out := r.request(t, nil, chat, "x-claude-code-session-id", "conv-1", "x-request-id", fmt.Sprint(turn))
		eps, body := pick(t, out)
		if want := chat[:len(chat)-1] + `,"stream_options":{"include_usage":true}}`; body != want { // asked for its usage, as serve does
			t.Fatalf("body handed back as %q, want %q", body, want)
		}
		first, rest, _ := strings.Cut(eps, ",")
		if rest == "" || rest == first {
			t.Errorf("turn %d: endpoints %q, want the pick and a fallback", turn, eps)
		}
		if turn == 0 {
			home = first
		} else if first != home {
			t.Errorf("turn %d picked %s, the conversation's home is %s", turn, first, home)
		}
		h := answer(t, st, first, 1000, 900*min(turn, 1))
		if route := h.Get("x-warden-route"); (turn == 0) != (route == string(place.ReasonNew)) {
			t.Errorf("turn %d route %q", turn, route)
		}
	}
	waitSettled(t, r.core)
	s := r.core.Status()
	rank := 0
	if r.eps[1] == home {
		rank = 1
	}
	if got := s.Replicas[rank]; got.Requests != 3 || got.PromptTokens != 3000 || got.CachedTokens != 1800 || got.Sticky != 2 {
		t.Errorf("home replica %d: requests %d prompt %d cached %d sticky %d; want 3, 3000, 1800, 2",
			rank, got.Requests, got.PromptTokens, got.CachedTokens, got.Sticky)
	}
}

// TestServedElsewhereIsAccountedThere: when the gateway served a request on
// a fallback (the pick could not be reached), the usage is counted on the
// replica that served it, the pick leaves the rotation, and the retry is
// counted.
func TestServedElsewhereIsAccountedThere(t *testing.T) {
	r := newRig(t, 2, router.Config{}, Config{Fallbacks: DefaultFallbacks})
	st, out := r.request(t, nil, chat, "x-claude-code-session-id", "conv-2")
	eps, _ := pick(t, out)
	first, fallback, _ := strings.Cut(eps, ",")
	answer(t, st, fallback, 500, 0)
	waitSettled(t, r.core)
	s := r.core.Status()
	for _, rep := range s.Replicas {
		want := uint64(0)
		if strings.HasSuffix(rep.URL, fallback) {
			want = 500
		}
		if rep.PromptTokens != want {
			t.Errorf("replica %d (%s): prompt %d, want %d (picked %s, served %s)", rep.Rank, rep.URL, rep.PromptTokens, want, first, fallback)
		}
		if strings.HasSuffix(rep.URL, first) && rep.Up {
			t.Errorf("the unreachable pick %s is still in rotation", first)
		}
	}
}

// TestSubsetHintAndRefusals: the gateway's subset hint restricts the pick
// (as a list or a comma string); one that names no endpoint of the picker
// gets 503; a body over the limit gets 413 in the API's shape.
func TestSubsetHintAndRefusals(t *testing.T) {
	r := newRig(t, 3, router.Config{MaxBodyBytes: 4096}, Config{Fallbacks: DefaultFallbacks})
	hint := func(v *structpb.Value) *corev3.Metadata {
		return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: {Fields: map[string]*structpb.Value{SubsetKey: v}}}}
	}
	list, _ := structpb.NewList([]any{r.eps[2]})
	for name, md := range map[string]*corev3.Metadata{
		"list":   hint(structpb.NewListValue(list)),
		"string": hint(structpb.NewStringValue(r.eps[2] + ", 10.9.9.9:1")),
	} {
		for i := range 3 {
			_, out := r.request(t, md, chat, "x-claude-code-session-id", fmt.Sprintf("%s-%d", name, i))
			if eps, _ := pick(t, out); eps != r.eps[2] {
				t.Errorf("%s hint: picked %q, want only %s", name, eps, r.eps[2])
			}
		}
	}
	_, out := r.request(t, hint(structpb.NewStringValue("10.9.9.9:1")), chat)
	if ir := out[len(out)-1].GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 503 {
		t.Errorf("a hint with no endpoint of ours: %v, want 503", out[len(out)-1])
	}
	_, out = r.request(t, nil, `{"model":"m","pad":"`+strings.Repeat("x", 5000)+`"}`)
	ir := out[len(out)-1].GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 413 || !strings.Contains(gjson.GetBytes(ir.GetBody(), "error.message").Str, "--max-body-bytes") {
		t.Errorf("an over-limit body: %v, want 413 naming the flag", out[len(out)-1])
	}
}

// TestHealthServices: liveness, readiness and the ext_proc service are
// SERVING with a replica in rotation.
func TestHealthServices(t *testing.T) {
	r := newRig(t, 1, router.Config{}, Config{Fallbacks: DefaultFallbacks})
	hc := healthpb.NewHealthClient(r.conn)
	for _, svc := range []string{"liveness", "readiness", ServiceName} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, resp.GetStatus(), err)
		}
	}

	// With no engine in rotation (the only one is gone), readiness and the
	// ext_proc service say NOT_SERVING; liveness stays SERVING.
	gone := healthyEngine(t)
	gone.Close()
	core, err := router.New(router.Config{Policy: place.PolicySticky, Logger: slog.New(slog.DiscardHandler)},
		[]router.Backend{{Rank: 0, URL: gone.URL, MaxNumSeqs: 32}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // engine.CheckFailsDown failed checks take it out
		core.CheckNow(context.Background())
	}
	s, err := New(core, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	down := healthpb.NewHealthClient(conn)
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{"liveness": healthpb.HealthCheckResponse_SERVING,
		"readiness": healthpb.HealthCheckResponse_NOT_SERVING, ServiceName: healthpb.HealthCheckResponse_NOT_SERVING} {
		resp, err := down.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != want {
			t.Errorf("no engine in rotation: health %q: %v %v, want %v", svc, resp.GetStatus(), err, want)
		}
	}
}

// TestEndpointsFile: llm-d's schema parses; bad entries are refused with
// the entry named.
func TestEndpointsFile(t *testing.T) {
	eps, err := ParseEndpoints([]byte("endpoints:\n  - name: vllm-0\n    address: \"10.0.0.1\"\n    port: \"8000\"\n    labels: {model: m}\n" +
		"  - name: vllm-1\n    namespace: inference\n    address: \"10.0.0.2\"\n    port: \"8001\"\n"))
	if err != nil || len(eps) != 2 || eps[1].HostPort() != "10.0.0.2:8001" || eps[0].Labels["model"] != "m" {
		t.Fatalf("parsed %+v, %v", eps, err)
	}
	for body, want := range map[string]string{
		"endpoints:\n  - name: a\n    address: host.local\n    port: \"1\"\n":             "not a literal IPv4",
		"endpoints:\n  - name: a\n    address: \"10.0.0.1\"\n    port: \"0\"\n":           "1-65535",
		"endpoints:\n  - address: \"10.0.0.1\"\n    port: \"1\"\n":                        "no name",
		"endpoints:\n  - name: a\n    address: \"10.0.0.1\"\n    port: \"1\"\n    x: 1\n": "not an endpoints file",
	} {
		if _, err := ParseEndpoints([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", body, err, want)
		}
	}
}

func waitSettled(t *testing.T, core *router.Core) {
	t.Helper()
	simproc.Poll(t, "no request in flight", func() bool { return core.Status().InFlight == 0 })
}

// TestWatchEndpointsFollowsTheFile: an endpoints file written in place or
// replaced by a rename (as scripts and editors do) is read again; a broken
// write is skipped and the endpoints stay as they were.
func TestWatchEndpointsFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "endpoints.yaml")
	write := func(body string) {
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("endpoints:\n  - {name: a, address: \"10.0.0.1\", port: \"8000\"}\n")
	got := make(chan []Endpoint, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go WatchEndpoints(ctx, path, slog.New(slog.DiscardHandler), func(eps []Endpoint) { got <- eps })
	// Replaced until the watch, started concurrently, has seen it once.
	var eps []Endpoint
	simproc.Poll(t, "the replaced file read again", func() bool {
		write("endpoints:\n  - {name: a, address: \"10.0.0.1\", port: \"8000\"}\n  - {name: b, address: \"10.0.0.2\", port: \"8000\"}\n")
		select {
		case eps = <-got:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	if len(eps) != 2 || eps[1].HostPort() != "10.0.0.2:8000" {
		t.Errorf("after the rename: %+v", eps)
	}
	for len(got) > 0 { // replaced more than once
		<-got
	}
	if err := os.WriteFile(path, []byte("endpoints: [{name: c, address: nope, port: \"1\"}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("endpoints:\n  - {name: d, address: \"10.0.0.4\", port: \"9000\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case eps := <-got:
		if len(eps) != 1 || eps[0].Name != "d" {
			t.Errorf("after writes in place: %+v (a broken write must not be taken)", eps)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the file written in place was not read again")
	}
}

// TestWatchEndpointsFollowsAConfigMap: a mounted ConfigMap's file is a link
// through ..data, which Kubernetes swaps to a new directory; no event names
// the file, but the swap is followed.
func TestWatchEndpointsFollowsAConfigMap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, body string) {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "endpoints.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		os.Remove(tmp)
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "endpoints:\n  - {name: a, address: \"10.0.0.1\", port: \"8000\"}\n")
	path := filepath.Join(dir, "endpoints.yaml")
	if err := os.Symlink("..data/endpoints.yaml", path); err != nil {
		t.Fatal(err)
	}
	got := make(chan []Endpoint, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go WatchEndpoints(ctx, path, slog.New(slog.DiscardHandler), func(eps []Endpoint) { got <- eps })
	n := 1
	var eps []Endpoint
	simproc.Poll(t, "the swapped ConfigMap read again", func() bool {
		n++
		version(fmt.Sprintf("..v%d", n), "endpoints:\n  - {name: b, address: \"10.0.0.2\", port: \"8000\"}\n")
		select {
		case eps = <-got:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	if len(eps) != 1 || eps[0].Name != "b" {
		t.Errorf("after the swap: %+v", eps)
	}
}

var _ Core = (*router.Core)(nil)

package epp

// The picker driven the way gateways and clients really behave, at the
// protocol level, in both body modes: clients that give up before the
// answer, answers with headers only, trailers, empty and large bodies,
// requests that are not conversation turns, body-keyed conversations with
// a mapped model name, OpenAI streams without usage, Anthropic server
// tools, readiness while draining, and a gateway that vanishes. (The same
// through real Envoy: realenvoy/gateway_test.go; any picker:
// epp/eppcheck.)

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/place"
)

// gwRig is a picker over n fake engines, its gRPC server made with the
// picker's own server options, and the Server itself.
type gwRig struct {
	*rig
	s   *Server
	lis string
}

func newGWRig(t *testing.T, n int, served string, maxBody int64, cfg Config) *gwRig {
	t.Helper()
	var bs []router.Backend
	r := &rig{}
	for i := range n {
		e := healthyEngine(t)
		bs = append(bs, router.Backend{Rank: i, URL: e.URL, MaxNumSeqs: 32})
		r.eps = append(r.eps, strings.TrimPrefix(e.URL, "http://"))
	}
	core, err := router.New(router.Config{Policy: place.PolicySticky, ServedModel: served, MaxBodyBytes: maxBody, Logger: slog.New(slog.DiscardHandler)}, bs)
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
	g := grpc.NewServer(s.ServerOptions()...)
	s.Register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.core, r.client, r.conn = core, extprocv3.NewExternalProcessorClient(conn), conn
	return &gwRig{rig: r, s: s, lis: ln.Addr().String()}
}

type bodyMode int

const (
	duplexMode bodyMode = iota
	bufferedMode
)

var bodyModes = []struct {
	name string
	m    bodyMode
}{{"full-duplex", duplexMode}, {"buffered", bufferedMode}}

func (m bodyMode) config() *extprocv3.ProtocolConfiguration {
	if m == bufferedMode {
		return &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_STREAMED}
	}
	return &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}
}

// exchange plays a request as Envoy does in mode m: headers (ending the
// request when body is nil), the body in pieces of piece bytes (buffered:
// one message, after the headers' answer), trailers when asked. It returns
// the stream and every answer up to the request's end: the pick with the
// body handed back, or an immediate answer.
func (r *gwRig) exchange(t *testing.T, m bodyMode, path string, body []byte, piece int, trailers bool, kv ...string) (extprocv3.ExternalProcessor_ProcessClient, []*extprocv3.ProcessingResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a picker that hangs fails the test
	t.Cleanup(cancel)
	st, err := r.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(req *extprocv3.ProcessingRequest) {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	var out []*extprocv3.ProcessingResponse
	recv := func() *extprocv3.ProcessingResponse {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(out), err)
		}
		out = append(out, resp)
		return resp
	}
	method := "POST"
	if body == nil {
		method = "GET"
	}
	h := headers(append([]string{":method", method, ":path", path}, kv...)...)
	h.EndOfStream = body == nil
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}, ProtocolConfig: m.config()})
	if body == nil {
		recv()
		return st, out
	}
	if m == bufferedMode {
		if recv().GetRequestHeaders() == nil {
			t.Fatalf("buffered mode: the headers answered with %v", out[0])
		}
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
		recv()
		return st, out
	}
	for i := 0; ; i += piece {
		end := min(i+piece, len(body))
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: body[i:end], EndOfStream: end == len(body) && !trailers}}})
		if end == len(body) {
			break
		}
	}
	if trailers {
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}})
	}
	for {
		resp := recv()
		switch {
		case resp.GetImmediateResponse() != nil:
			return st, out
		case trailers && resp.GetRequestTrailers() != nil:
			return st, out
		case resp.GetRequestHeaders().GetResponse().GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE:
			return st, out
		case !trailers && resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream():
			return st, out
		}
	}
}

// handedBack is the body as the gateway passes it on: full-duplex, the
// streamed pieces; buffered, the replaced body or the one sent.
func handedBack(m bodyMode, sent []byte, out []*extprocv3.ProcessingResponse) []byte {
	var b []byte
	for _, r := range out {
		if cr := r.GetRequestHeaders().GetResponse(); cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
			return cr.GetBodyMutation().GetBody()
		}
		mut := r.GetRequestBody().GetResponse().GetBodyMutation()
		if m == bufferedMode && mut.GetBody() != nil {
			return mut.GetBody()
		}
		b = append(b, mut.GetStreamedResponse().GetBody()...)
	}
	if m == bufferedMode {
		return sent
	}
	return b
}

// reply plays a short 200 answer through the picker and ends the stream.
func reply(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream")}})
	if resp, err := st.Recv(); err != nil || resp.GetResponseHeaders() == nil {
		t.Fatalf("the response headers answered with %v, %v", resp, err)
	}
	st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"), EndOfStream: true}}})
	if resp, err := st.Recv(); err != nil || resp.GetResponseBody() == nil {
		t.Fatalf("the response body answered with %v, %v", resp, err)
	}
	st.CloseSend()
	for {
		if _, err := st.Recv(); err != nil {
			return
		}
	}
}

// destination is the picked endpoints (header and metadata must agree).
func destination(t *testing.T, out []*extprocv3.ProcessingResponse) string {
	t.Helper()
	for _, r := range out {
		cr := r.GetRequestHeaders().GetResponse()
		if cr == nil {
			cr = r.GetRequestBody().GetResponse()
		}
		for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() == DestinationHeader {
				eps := string(h.GetHeader().GetRawValue())
				md := r.GetDynamicMetadata().GetFields()[LBNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
				if md != eps {
					t.Fatalf("header %q differs from its metadata %q", eps, md)
				}
				return eps
			}
		}
	}
	return ""
}

// settled waits until nothing is in flight.
func settled(t *testing.T, core *router.Core) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); core.Status().InFlight != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still in flight", core.Status().InFlight)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientGoneBeforeTheAnswerIsNoEngineFailure: a client that gives up
// before the first answer byte ends the stream (Envoy half-closes it, or
// resets it); that is the client's 499, as `warden serve` records it: no
// error on the engine, no failure streak that takes it out, no turn.
func TestClientGoneBeforeTheAnswerIsNoEngineFailure(t *testing.T) {
	for _, bm := range bodyModes {
		t.Run(bm.name, func(t *testing.T) {
			r := newGWRig(t, 2, "", 0, Config{Fallbacks: DefaultFallbacks})
			for i := range 10 {
				ctx, cancel := context.WithCancel(context.Background())
				st, err := r.client.Process(ctx)
				if err != nil {
					t.Fatal(err)
				}
				h := headers(":method", "POST", ":path", "/v1/chat/completions", "x-session-affinity", "gone")
				st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}, ProtocolConfig: bm.m.config()})
				if bm.m == bufferedMode {
					st.Recv()
				}
				st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(chat), EndOfStream: true}}})
				st.Recv() // the pick
				if i%2 == 0 {
					st.CloseSend() // Envoy's way: the stream half-closed
					for {
						if _, err := st.Recv(); err != nil {
							break
						}
					}
				}
				cancel()
			}
			settled(t, r.core)
			for _, rep := range r.core.Status().Replicas {
				if !rep.Up || rep.Errors != 0 || rep.Requests != 0 {
					t.Errorf("replica %d: up %v, %d errors, %d turns; want up, none, none (the clients went away)", rep.Rank, rep.Up, rep.Errors, rep.Requests)
				}
			}
		})
	}
}

// TestHeadersOnlyAnswerIsTheEnginesError: a 500 with no body (the response
// headers end the stream) is the engine's error, accounted at once.
func TestHeadersOnlyAnswerIsTheEnginesError(t *testing.T) {
	for _, bm := range bodyModes {
		t.Run(bm.name, func(t *testing.T) {
			r := newGWRig(t, 2, "", 0, Config{Fallbacks: DefaultFallbacks})
			st, out := r.exchange(t, bm.m, "/v1/chat/completions", []byte(chat), 1<<20, false, "x-session-affinity", "s")
			if destination(t, out) == "" {
				t.Fatalf("no pick: %v", out)
			}
			h := headers(":status", "500")
			h.EndOfStream = true
			st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: h}})
			if resp, err := st.Recv(); err != nil || resp.GetResponseHeaders() == nil {
				t.Fatalf("the response headers answered with %v, %v", resp, err)
			}
			st.CloseSend()
			st.Recv()
			settled(t, r.core)
			var errs, turns uint64
			for _, rep := range r.core.Status().Replicas {
				errs, turns = errs+rep.Errors, turns+rep.Requests
			}
			if errs != 1 || turns != 1 {
				t.Errorf("%d errors, %d turns; want the engine's 500 as 1 error on its turn", errs, turns)
			}
		})
	}
}

// TestTrailersEndTheBody: a body followed by trailers, which come before
// the pick, is handed back once, in the headers' answer that replaces the
// body (CONTINUE_AND_REPLACE): a body streamed back while trailers are
// pending reaches the engine twice through Envoy 1.40 with a retry policy
// (realenvoy TestTrailersDoNotRepeatTheBody).
func TestTrailersEndTheBody(t *testing.T) {
	r := newGWRig(t, 1, "", 0, Config{Fallbacks: DefaultFallbacks})
	_, out := r.exchange(t, duplexMode, "/v1/chat/completions", []byte(chat), 10, true, "x-session-affinity", "t")
	if destination(t, out) == "" {
		t.Fatalf("no pick: %v", out)
	}
	if len(out) != 1 || out[0].GetRequestHeaders().GetResponse().GetStatus() != extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		t.Fatalf("answers %v; want one headers answer that replaces the body", out)
	}
	if got := handedBack(duplexMode, nil, out); !strings.HasPrefix(string(got), chat[:len(chat)-1]) || strings.Count(string(got), "hello") != 1 {
		t.Errorf("body handed back as %q, want it once", got)
	}
}

// TestEmptyBody: an empty chunked POST (headers, then an empty body that
// ends the stream) is picked and its empty body ends the request, in the
// message each mode wants.
func TestEmptyBody(t *testing.T) {
	for _, bm := range bodyModes {
		t.Run(bm.name, func(t *testing.T) {
			r := newGWRig(t, 2, "", 0, Config{Fallbacks: DefaultFallbacks})
			done := make(chan []*extprocv3.ProcessingResponse)
			go func() { // a picker that hangs fails the test instead of blocking it
				_, out := r.exchange(t, bm.m, "/v1/chat/completions", []byte{}, 1, false, "x-session-affinity", "e")
				done <- out
			}()
			var out []*extprocv3.ProcessingResponse
			select {
			case out = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("no answer to an empty body")
			}
			if destination(t, out) == "" {
				t.Fatalf("no pick: %v", out)
			}
			if bm.m == bufferedMode && out[len(out)-1].GetRequestBody() == nil {
				t.Errorf("buffered: the body answered with %v, want request_body", out[len(out)-1])
			}
		})
	}
}

// TestLargeBufferedBody: in buffered mode the body is one gRPC message;
// one over gRPC's default 4 MiB limit but under the picker's is picked,
// one over the picker's gets its 413, never a gRPC error (on which a
// fail-open gateway skips the picker).
func TestLargeBufferedBody(t *testing.T) {
	r := newGWRig(t, 2, "", 6<<20, Config{Fallbacks: DefaultFallbacks})
	big := func(n int) []byte {
		return []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", n) + `"}]}`)
	}
	_, out := r.exchange(t, bufferedMode, "/v1/chat/completions", big(5<<20), 0, false, "x-session-affinity", "big")
	if destination(t, out) == "" {
		t.Errorf("a 5 MiB body under the 6 MiB limit: %v, want a pick", out[len(out)-1])
	}
	_, out = r.exchange(t, bufferedMode, "/v1/chat/completions", big(7<<20), 0, false, "x-session-affinity", "bigger")
	if ir := out[len(out)-1].GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 413 {
		t.Errorf("a 7 MiB body over the 6 MiB limit: %v, want 413", out[len(out)-1])
	}
}

// TestNonCompletionPathsAreNotTurns: GET /v1/models and other paths that
// are no conversation turn are sent to an engine but neither placed as a
// conversation nor counted.
func TestNonCompletionPathsAreNotTurns(t *testing.T) {
	for _, bm := range bodyModes {
		t.Run(bm.name, func(t *testing.T) {
			r := newGWRig(t, 2, "", 0, Config{Fallbacks: DefaultFallbacks})
			for _, path := range []string{"/v1/models", "/health", "/tokenize"} {
				var body []byte
				if path == "/tokenize" {
					body = []byte(`{"model":"m","prompt":"hi"}`)
				}
				st, out := r.exchange(t, bm.m, path, body, 1<<20, false)
				if destination(t, out) == "" {
					t.Errorf("%s: no endpoint named: %v", path, out)
				}
				reply(t, st)
			}
			settled(t, r.core)
			s := r.core.Status()
			if s.SessionsSeen != 0 {
				t.Errorf("%d sessions seen, want none", s.SessionsSeen)
			}
			for _, rep := range s.Replicas {
				if rep.Requests != 0 {
					t.Errorf("replica %d: %d turns, want none", rep.Rank, rep.Requests)
				}
			}
		})
	}
}

// TestBodyKeysSurviveTheModelMapping: conversations keyed by a body field
// (prompt_cache_key) or by their fingerprint, asking with another model
// name than the served one, keep their own identity: two conversations
// are two, and each one's turns stick.
func TestBodyKeysSurviveTheModelMapping(t *testing.T) {
	for _, bm := range bodyModes {
		t.Run(bm.name, func(t *testing.T) {
			r := newGWRig(t, 2, "m", 0, Config{Fallbacks: DefaultFallbacks})
			body := func(key, sys string, turns int) []byte {
				var msgs []string
				for i := range turns {
					msgs = append(msgs, `{"role":"user","content":"turn `+string(rune('0'+i))+` of `+sys+`"}`)
				}
				k := ""
				if key != "" {
					k = `"prompt_cache_key":"` + key + `",`
				}
				return []byte(`{"model":"a-much-longer-client-model-name",` + k + `"stream":true,"messages":[{"role":"system","content":"` + sys + `"},` + strings.Join(msgs, ",") + `]}`)
			}
			homes := map[string]string{}
			for turn := 1; turn <= 3; turn++ {
				for _, c := range []struct{ key, sys string }{{"conv-aaaa", "sys one"}, {"conv-bbbb", "sys two"}, {"", "fingerprint one"}, {"", "fingerprint two"}} {
					b := body(c.key, c.sys, turn)
					st, out := r.exchange(t, bm.m, "/v1/chat/completions", b, 16, false)
					eps := destination(t, out)
					if got := gjson.GetBytes(handedBack(bm.m, b, out), "model").Str; got != "m" {
						t.Errorf("the model came back as %q, want the served m", got)
					}
					if got := gjson.GetBytes(handedBack(bm.m, b, out), "prompt_cache_key").Str; got != c.key {
						t.Errorf("prompt_cache_key came back as %q, want %q", got, c.key)
					}
					first, _, _ := strings.Cut(eps, ",")
					if turn == 1 {
						homes[c.key+c.sys] = first
					} else if first != homes[c.key+c.sys] {
						t.Errorf("%s%s turn %d on %s, its home is %s", c.key, c.sys, turn, first, homes[c.key+c.sys])
					}
					reply(t, st)
				}
			}
			settled(t, r.core)
			if n := r.core.Status().SessionsSeen; n != 4 {
				t.Errorf("%d sessions seen, want the 4 conversations", n)
			}
		})
	}
}

// TestOpenAIStreamsAskForUsage: an OpenAI chat stream without
// stream_options.include_usage is handed back asking for it, as `warden
// serve` does (the picker reads the usage for its accounting).
func TestOpenAIStreamsAskForUsage(t *testing.T) {
	for _, bm := range bodyModes {
		t.Run(bm.name, func(t *testing.T) {
			r := newGWRig(t, 1, "m", 0, Config{Fallbacks: DefaultFallbacks})
			b := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			_, out := r.exchange(t, bm.m, "/v1/chat/completions", b, 8, false, "x-session-affinity", "u")
			if got := handedBack(bm.m, b, out); !gjson.GetBytes(got, "stream_options.include_usage").Bool() {
				t.Errorf("handed back %s, want stream_options.include_usage true", got)
			}
		})
	}
}

// TestAnthropicServerToolsAreDropped: Anthropic server tools (web search),
// which vLLM refuses with a 400, are dropped from the body as `warden
// serve` drops them; client tools stay.
func TestAnthropicServerToolsAreDropped(t *testing.T) {
	for _, bm := range bodyModes {
		t.Run(bm.name, func(t *testing.T) {
			r := newGWRig(t, 1, "m", 0, Config{Fallbacks: DefaultFallbacks})
			b := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"tools":[` +
				`{"type":"web_search_20250305","name":"web_search","max_uses":5},{"name":"Read","input_schema":{"type":"object"}}]}`)
			_, out := r.exchange(t, bm.m, "/v1/messages", b, 8, false, "x-session-affinity", "tools")
			got := handedBack(bm.m, b, out)
			if names := gjson.GetBytes(got, "tools.#.name").String(); names != `["Read"]` {
				t.Errorf("tools handed back %s, want only the client's Read", names)
			}
		})
	}
}

// TestHealthServicesWhileDraining: readiness (and the ext_proc service's
// status) go NOT_SERVING once the picker drains, and stay so; liveness
// stays SERVING; with no engine in rotation readiness is NOT_SERVING too.
func TestHealthServicesWhileDraining(t *testing.T) {
	r := newGWRig(t, 1, "", 0, Config{Fallbacks: DefaultFallbacks})
	hc := healthpb.NewHealthClient(r.conn)
	status := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if got := status("readiness"); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("readiness %v before draining", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.s.WatchHealth(ctx, time.Millisecond) // the periodic update must not undo the drain
	r.s.Drain()
	for range 3 {
		for _, svc := range []string{"readiness", ServiceName, ""} {
			if got := status(svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("%q while draining: %v, want NOT_SERVING", svc, got)
			}
		}
		if got := status("liveness"); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("liveness while draining: %v, want SERVING", got)
		}
	}
}

// TestVanishedGatewayReleasesItsPlacements: a gateway whose connection
// goes silent (its host gone: no FIN, no RST) is found out by the
// picker's keepalive pings; its streams end and their placements are
// released, in flight back to 0.
func TestVanishedGatewayReleasesItsPlacements(t *testing.T) {
	r := newGWRig(t, 1, "", 0, Config{Keepalive: 100 * time.Millisecond, KeepaliveTimeout: 100 * time.Millisecond})
	// A gateway behind a link the test can cut silently.
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	var mu sync.Mutex
	cut := false
	go func() {
		c, err := front.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.lis)
		if err != nil {
			return
		}
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if err != nil {
					return
				}
				mu.Lock()
				silent := cut
				mu.Unlock()
				if !silent { // after the cut, bytes are swallowed both ways: the link is dead
					dst.Write(buf[:n])
				}
			}
		}
		go pipe(up, c)
		pipe(c, up)
	}()
	conn, err := grpc.NewClient(front.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := headers(":method", "POST", ":path", "/v1/chat/completions", "x-session-affinity", "v")
	st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}})
	st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(chat), EndOfStream: true}}})
	for {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			break
		}
	}
	if n := r.core.Status().InFlight; n != 1 {
		t.Fatalf("%d in flight after the pick, want 1", n)
	}
	mu.Lock()
	cut = true
	mu.Unlock()
	settled(t, r.core)
	if rep := r.core.Status().Replicas[0]; rep.Errors != 0 || !rep.Up {
		t.Errorf("the engine: up %v, %d errors; the gateway vanished, not the engine", rep.Up, rep.Errors)
	}
}

// Package epp is the warden's second data plane: an endpoint picker (EPP)
// for a gateway that carries the bytes itself (Envoy, and every Gateway API
// inference gateway), speaking the endpoint-picker protocol v1.0.0 over
// Envoy's external processing gRPC service in full-duplex streamed mode.
//
// Per HTTP request the gateway opens one ext_proc stream. The picker
// buffers the request body, identifies the conversation and places it
// through the router core exactly as `warden serve` does (the core's
// Identify and Place, through the Core view), hands the body back (its model
// name mapped to the served one), and names
// the endpoint in the x-gateway-destination-endpoint header and the
// envoy.lb dynamic metadata (equal values, fallbacks after the first). It
// then reads the answer as the gateway streams it through (status, the
// endpoint that served, usage from JSON or SSE) and hands the outcome to
// router.Core.Finish, so the panel, /metrics, the decision log and the exit
// summary work as for `warden serve`. The package imports the core, never
// the HTTP proxy.
package epp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lmwarden/warden/internal/apierr"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
	"github.com/lmwarden/warden/router/modelname"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/router/reqedit"
	"github.com/lmwarden/warden/router/tap"
)

// The protocol's names (the Gateway API Inference Extension's EPP
// protocol, docs/proposals/004-endpoint-picker-protocol).
const (
	// DestinationHeader names the picked endpoints, "ip:port[,ip:port...]",
	// first the one to use, then fallbacks.
	DestinationHeader = "x-gateway-destination-endpoint"
	// LBNamespace is the dynamic metadata namespace of the pick (the same
	// value under DestinationHeader) and of what the gateway reports.
	LBNamespace = "envoy.lb"
	// ServedKey is the endpoint that answered, as the gateway reports it
	// under LBNamespace (Envoy's override_host policy: selected_host_key).
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace and SubsetKey are the gateway's subset hint: the
	// picker must choose only among these endpoints.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// ServiceName is the ext_proc service, also a gRPC health service name.
	ServiceName = "envoy.service.ext_proc.v3.ExternalProcessor"
)

const (
	// DefaultFallbacks is the fallbacks `warden epp` asks for (--fallbacks).
	DefaultFallbacks = 2
	// DefaultKeepalive is how long a gateway's connection may be silent
	// before the picker pings it; DefaultKeepaliveTimeout how long it
	// waits for the answer before it closes the connection (and ends its
	// streams: their placements are released).
	DefaultKeepalive        = 30 * time.Second
	DefaultKeepaliveTimeout = 10 * time.Second
	// bodyChunk is the size of the body pieces handed back to the gateway
	// (well under gRPC's 4 MiB message limit).
	bodyChunk = 64 << 10
)

// Config configures a Server: the picker's own settings (the body limit is
// the core's, router.Config.MaxBodyBytes).
type Config struct {
	// Fallbacks is how many endpoints follow the pick, for the gateway to
	// retry on; 0 = none.
	Fallbacks int
	// Keepalive and KeepaliveTimeout: the picker's pings of a silent
	// gateway connection (ServerOptions); 0 = the defaults.
	Keepalive, KeepaliveTimeout time.Duration
}

// Core is the view of the router core the endpoint picker needs:
// identifying, placing and finishing a request, the replicas it names to
// the gateway, and readiness (router.Core has it; epp_test.go asserts so).
type Core interface {
	Config() router.Config
	Logger() *slog.Logger
	Now() time.Time
	Ready() bool
	Replicas() []*router.Replica
	Identify(h http.Header, path string, body []byte) (router.Request, error)
	RewriteModel(body []byte) []byte
	Place(ctx context.Context, req place.Request) router.Placement
	RetryAfter() int
	Finish(pl *router.Placement, o router.Outcome) router.Placement
	ForEngine(pl *router.Placement, kind tap.Kind, sessionField bool, body []byte) ([]byte, string)
}

// Server is the endpoint picker over a router core: the ext_proc service
// and the gRPC health services. Create it with New.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	core    Core
	cfg     Config
	maxBody int64 // the core's MaxBodyBytes
	log     *slog.Logger
	health  *health.Server
	// draining: readiness stays NOT_SERVING (Drain); the periodic update
	// no longer reads the core.
	draining    atomic.Bool
	toolsLogged sync.Map // server tool types dropped and logged once
}

// New returns a picker over core. Every replica's URL must name its host
// by IP address: the gateway is told endpoints as ip:port.
func New(core Core, cfg Config) (*Server, error) {
	if cfg.Fallbacks < 0 {
		return nil, fmt.Errorf("--fallbacks must be >= 0, got %d", cfg.Fallbacks)
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	if cfg.KeepaliveTimeout <= 0 {
		cfg.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	for _, r := range core.Replicas() {
		if err := CheckEndpoint(r.URL().Host); err != nil {
			return nil, fmt.Errorf("replica %d (%s): %w", r.Rank(), r.URL(), err)
		}
	}
	s := &Server{core: core, cfg: cfg, maxBody: core.Config().MaxBodyBytes, log: core.Logger(), health: health.NewServer()}
	s.updateHealth()
	return s, nil
}

// CheckEndpoint reports whether hostport is an endpoint a gateway can be
// told: a literal IP address and a port.
func CheckEndpoint(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || net.ParseIP(host) == nil || port == "" {
		return fmt.Errorf("the endpoint picker names endpoints as ip:port (Envoy's override_host takes no host names); got %q", hostport)
	}
	return nil
}

// ServerOptions are the gRPC server's settings the picker needs:
//
//   - the largest message: in buffered mode (a fail-open gateway) the whole
//     request body is one message, so gRPC's default 4 MiB would refuse a
//     body the picker takes, and a fail-open gateway would then pass it on
//     without a pick. Messages up to max(2 x MaxBodyBytes, 64 MiB) are
//     read, so that a body over MaxBodyBytes reaches the picker and gets
//     its 413 (keep the gateway's buffer limit at or below that);
//   - keepalive: a gateway connection silent for Keepalive is pinged, and
//     closed when no answer comes within KeepaliveTimeout (a gateway whose
//     host vanished, no FIN): its streams end and their placements are
//     released. Gateways may ping every 10 s or more (Envoy's bootstrap
//     here: 30 s).
func (s *Server) ServerOptions() []grpc.ServerOption {
	limit := max(2*s.maxBody, 64<<20) + 1<<20
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(limit, 1<<30))),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: s.cfg.Keepalive, Timeout: s.cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: min(10*time.Second, s.cfg.Keepalive), PermitWithoutStream: true}),
	}
}

// Drain reports the picker NOT_SERVING on its readiness services from now
// on (liveness stays SERVING), so that the gateway sends new streams
// elsewhere while those in flight end. Idempotent.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.updateHealth()
}

// Register adds the ext_proc service and the health services to g.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// WatchHealth keeps the readiness services in step with the core (a
// replica in rotation) every interval until ctx ends, then reports
// NOT_SERVING on all of them.
func (s *Server) WatchHealth(ctx context.Context, interval time.Duration) {
	s.updateHealth()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.health.Shutdown()
			return
		case <-t.C:
			s.updateHealth()
		}
	}
}

// updateHealth sets the health services: liveness is SERVING while the
// process runs; readiness, the ext_proc service's and the overall ("")
// status while a replica is in rotation and the picker is not draining.
func (s *Server) updateHealth() {
	ready := healthpb.HealthCheckResponse_NOT_SERVING
	if !s.draining.Load() && s.core.Ready() {
		ready = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)
	for _, name := range []string{"", "readiness", ServiceName} {
		s.health.SetServingStatus(name, ready)
	}
}

// Process is one HTTP request's ext_proc stream.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	x := &exchange{s: s, ctx: srv.Context()}
	for {
		req, err := srv.Recv()
		if err != nil {
			x.end(err)
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		out, err := x.handle(req)
		if err != nil {
			x.end(err)
			return err
		}
		for _, r := range out {
			if err := srv.Send(r); err != nil {
				x.end(err)
				return err
			}
		}
	}
}

// exchange is one request's state across its stream's messages.
type exchange struct {
	s       *Server
	ctx     context.Context
	start   time.Time
	header  http.Header
	path    string
	subset  []string // the gateway's subset hint; nil = none
	body    []byte
	hasBody bool // the request has a body (maybe empty: an empty chunked POST)
	// trailers: the request's trailers came before the pick (full-duplex
	// mode); the pick then answers them too.
	trailers bool
	decided  bool // the pick (or an immediate answer) was given
	// The gateway's body modes, from its first message: full-duplex (the
	// protocol's) hands the request body back and streams the answer
	// back; buffered/streamed bodies only get answers to let them pass.
	reqDuplex, respDuplex bool

	key     identity.SessionKey
	id      string // the client's X-Request-Id, for the decision log
	kind    tap.Kind
	stream  bool
	strip   bool // the picker asked for the usage chunk: the client does not get it
	pr      place.Request
	pl      router.Placement
	placed  bool // pl is in flight and must be finished
	status  int
	tap     *tap.Tap
	finish  bool // the answer ended
	replied bool // the gateway sent the answer's headers
}

func (x *exchange) handle(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	switch v := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		x.start = x.s.core.Now()
		x.readHeaders(v.RequestHeaders)
		x.subset = subsetHint(req.MetadataContext)
		x.reqDuplex, x.respDuplex = true, true
		if pc := req.GetProtocolConfig(); pc != nil {
			x.reqDuplex = pc.GetRequestBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
			x.respDuplex = pc.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
		}
		if v.RequestHeaders.EndOfStream {
			return x.decide()
		}
		if !x.reqDuplex { // the gateway waits for this answer before it sends the body
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{}}}}, nil
		}
		return nil, nil
	case *extprocv3.ProcessingRequest_RequestBody:
		if x.decided {
			// After an immediate answer; or the last piece again (Envoy
			// 1.35+ may re-deliver it, envoyproxy/envoy#46237): handled once.
			return nil, nil
		}
		x.hasBody = true
		if int64(len(x.body)+len(v.RequestBody.Body)) > x.s.maxBody {
			return x.refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf(
				"request body exceeds the endpoint picker's limit of %d bytes (warden epp --max-body-bytes)", x.s.maxBody))
		}
		x.body = append(x.body, v.RequestBody.Body...)
		// Buffered mode sends the whole body in one message, whose
		// end_of_stream is false when trailers follow (which that mode
		// does not send): it is the end either way.
		if v.RequestBody.EndOfStream || !x.reqDuplex {
			return x.decide()
		}
		return nil, nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !x.decided { // the trailers end the body: the pick answers both
			x.trailers = true
			return x.decide()
		}
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}}, nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return x.responseHeaders(v.ResponseHeaders, req.MetadataContext), nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		b := v.ResponseBody
		out := b.Body
		if x.tap != nil {
			out = x.tap.Pass(b.Body, b.EndOfStream) // the usage read; the chunk the picker asked for dropped
		}
		if b.EndOfStream {
			x.end(nil)
		}
		br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}
		if x.respDuplex { // full-duplex: only what comes back goes on to the client
			br.Response.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
				StreamedResponse: &extprocv3.StreamedBodyResponse{Body: out, EndOfStream: b.EndOfStream}}}
		}
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}}, nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.end(nil)
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}}, nil
	}
	return nil, nil
}

// readHeaders keeps the request's headers (Envoy's pseudo-headers give the
// path).
func (x *exchange) readHeaders(h *extprocv3.HttpHeaders) {
	x.header = http.Header{}
	for _, kv := range h.GetHeaders().GetHeaders() {
		v := kv.GetValue()
		if v == "" {
			v = string(kv.GetRawValue())
		}
		switch kv.GetKey() {
		case ":path":
			x.path, _, _ = strings.Cut(v, "?")
		case ":method", ":authority", ":scheme":
		default:
			x.header.Add(kv.GetKey(), v)
		}
	}
}

// subsetHint is the gateway's subset hint, nil when it gives none. It
// comes as a list of strings or as one comma-separated string.
func subsetHint(md *corev3.Metadata) []string {
	v, ok := md.GetFilterMetadata()[SubsetNamespace].GetFields()[SubsetKey]
	if !ok {
		return nil
	}
	out := []string{}
	add := func(s string) {
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
	}
	if l := v.GetListValue(); l != nil {
		for _, e := range l.GetValues() {
			add(e.GetStringValue())
		}
	} else {
		add(v.GetStringValue())
	}
	return out
}

// decide identifies the request and places it: the pick with the body
// handed back, or an immediate answer. A request that is no conversation
// turn (GET /v1/models, /tokenize, ...) is passed on without a placement.
func (x *exchange) decide() ([]*extprocv3.ProcessingResponse, error) {
	x.decided = true
	core := x.s.core
	if tap.KindOf(x.path) == tap.None {
		return x.passOn()
	}
	req, err := core.Identify(x.header, x.path, x.body)
	if err != nil {
		return x.refuse(http.StatusBadRequest, err.Error())
	}
	if req.Model == modelname.Refuse {
		return x.refuse(http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist. This warden serves `%s`.",
			req.Fields.Model.Str, core.Config().ServedModel))
	}
	x.kind, x.stream, x.key, x.id, x.pr = req.Kind, req.Stream, req.Key, req.ID, req.Place
	sessionField := req.Fields.SessionID.Exists() // read before the body is edited
	edited := x.edit(req)
	x.pr.BodyBytes = len(x.body)
	if x.subset != nil {
		x.pr.Skip = x.outside(x.subset)
		if len(x.pr.Skip) == len(core.Replicas()) {
			return x.refuse(http.StatusServiceUnavailable,
				fmt.Sprintf("no endpoint of the gateway's subset hint (%s) is one of this picker's", strings.Join(x.subset, ",")))
		}
	}
	pl := core.Place(x.ctx, x.pr)
	if pl.Rank < 0 {
		if pl.Reason == place.ReasonWait { // the gateway gave up while the request was held
			return nil, status.Error(codes.Canceled, "the request ended while held")
		}
		if pl.Reason == place.ReasonBusy { // the admission queue's bound: told to retry
			return x.overloaded(core.RetryAfter())
		}
		msg := "no endpoint is ready"
		if x.pr.Pinned {
			msg = fmt.Sprintf("replica %d (%s) does not exist or is not available", x.pr.Pin, identity.PinHeader)
		}
		return x.refuse(http.StatusServiceUnavailable, msg)
	}
	x.pl, x.placed = pl, true
	body, label := core.ForEngine(&pl, x.kind, sessionField, x.body)
	if len(body) > 0 && len(x.body) > 0 && &body[0] != &x.body[0] { // ForEngine edited a copy
		x.body, edited = body, true
	}
	return x.pick(append([]string{pl.Replica.URL().Host}, x.fallbacks(pl.Replica)...), edited, label), nil
}

// edit makes the body edits `warden serve` makes, in its order, after the
// request was identified (the key is a copy; the edits move bytes under
// req.Fields, read here before each edit): an OpenAI stream is asked for
// its usage chunk, Anthropic server tools are dropped, the model name is
// mapped. It reports whether the body changed.
func (x *exchange) edit(req router.Request) (edited bool) {
	f := &req.Fields
	var drop reqedit.ToolDrop
	if strings.HasPrefix(x.path, "/v1/messages") {
		drop = reqedit.ServerTools(f.Tools)
	}
	if x.stream && x.kind == tap.OpenAI && !f.StreamOptions.Get("include_usage").Bool() {
		if b, ok := reqedit.IncludeUsage(x.body, f.StreamOptions); ok {
			x.body, edited, x.strip = b, true, true
		}
	}
	if b, dropped := reqedit.DropTools(x.body, drop); len(dropped) > 0 {
		x.body, edited = b, true
		for _, k := range dropped {
			if _, seen := x.s.toolsLogged.LoadOrStore(k, true); !seen {
				x.s.log.Info("server tool removed from requests (vLLM's Anthropic endpoint needs input_schema; Anthropic runs these tools, the engine cannot)",
					"tool_type", k)
			}
		}
	}
	if req.Model == modelname.Rewrite {
		// Every requested name is served by the one model, as `warden serve`
		// does: a client's own names (Claude Code's) reach the engines.
		x.body, edited = x.s.core.RewriteModel(x.body), true
	}
	return edited
}

// passOn names endpoints for a request that is no conversation turn: the
// least loaded in rotation (within the subset hint) and fallbacks, with no
// placement, so it is neither held, nor counted, nor does it move a
// conversation.
func (x *exchange) passOn() ([]*extprocv3.ProcessingResponse, error) {
	if x.subset != nil {
		x.pr.Skip = x.outside(x.subset)
	}
	eps := x.inRotation(nil, x.s.cfg.Fallbacks+1)
	if len(eps) == 0 {
		return x.refuse(http.StatusServiceUnavailable, "no endpoint is ready")
	}
	return x.pick(eps, false, ""), nil
}

// pick is the answer that names eps (the pick first) and hands the body
// back in the form the mode wants: buffered, with the body's answer (the
// body replaced when edited); full-duplex, with the headers' answer and
// the body streamed back after it, or, when the request's trailers came
// before the pick, in one headers answer that replaces the body
// (CONTINUE_AND_REPLACE: with trailers pending, Envoy 1.40 passes a body
// streamed back on twice when the route has a retry policy, its retry
// buffer re-sent when the trailers continue); a request without a body,
// the headers' answer alone. label is the conversation's for the engines'
// KV events ("" none).
func (x *exchange) pick(eps []string, edited bool, label string) []*extprocv3.ProcessingResponse {
	dest := strings.Join(eps, ",")
	cr := &extprocv3.CommonResponse{
		ClearRouteCache: true,
		HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{{
				Header:       &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte(dest)},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			}},
			RemoveHeaders: []string{strings.ToLower(identity.PinHeader)},
		},
	}
	labelHeader(cr.HeaderMutation, label)
	switch {
	case !x.reqDuplex && x.hasBody:
		if edited {
			cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: x.body}}
			cr.HeaderMutation.SetHeaders = append(cr.HeaderMutation.SetHeaders, &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: "content-length", RawValue: []byte(strconv.Itoa(len(x.body)))},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
		}
		return []*extprocv3.ProcessingResponse{{
			Response:        &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}},
			DynamicMetadata: pickMetadata(dest),
		}}
	case x.trailers:
		cr.Status = extprocv3.CommonResponse_CONTINUE_AND_REPLACE
		cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: x.body}}
		return []*extprocv3.ProcessingResponse{{
			Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}},
			DynamicMetadata: pickMetadata(dest),
		}}
	}
	if edited { // the body handed back has another length: chunked on to the engine
		cr.HeaderMutation.RemoveHeaders = append(cr.HeaderMutation.RemoveHeaders, "content-length")
	}
	out := []*extprocv3.ProcessingResponse{{
		Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}},
		DynamicMetadata: pickMetadata(dest),
	}}
	if !x.hasBody {
		return out
	}
	return append(out, bodyBack(x.body)...)
}

// labelHeader sets the conversation's label for the engines' KV events
// (router.SessionIDHeader), or removes a client's own value without one.
func labelHeader(m *extprocv3.HeaderMutation, label string) {
	name := strings.ToLower(router.SessionIDHeader)
	if label == "" {
		m.RemoveHeaders = append(m.RemoveHeaders, name)
		return
	}
	m.SetHeaders = append(m.SetHeaders, &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: name, RawValue: []byte(label)}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
}

// pickMetadata is the pick as envoy.lb dynamic metadata.
func pickMetadata(eps string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(eps),
		}}),
	}}
}

// bodyBack hands the buffered body back to the gateway (its edits made),
// in pieces, the last one ending the stream (full-duplex mode forwards
// only what the picker sends back); an empty body is one empty piece that
// ends it.
func bodyBack(body []byte) []*extprocv3.ProcessingResponse {
	var out []*extprocv3.ProcessingResponse
	for i := 0; ; i += bodyChunk {
		end := min(i+bodyChunk, len(body))
		out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
					Body: body[i:end], EndOfStream: end == len(body)}}}}}}})
		if end == len(body) {
			return out
		}
	}
}

// outside is the ranks of the replicas whose endpoint is not in eps.
func (x *exchange) outside(eps []string) []int {
	var skip []int
	for _, r := range x.s.core.Replicas() {
		if !slices.Contains(eps, r.URL().Host) {
			skip = append(skip, r.Rank())
		}
	}
	return skip
}

// fallbacks are up to Config.Fallbacks other endpoints in rotation (and in
// the subset hint), least loaded first, for the gateway's retries.
func (x *exchange) fallbacks(primary *router.Replica) []string {
	return x.inRotation(primary, x.s.cfg.Fallbacks)
}

// inRotation is up to n endpoints in rotation other than exclude (and not
// skipped by the subset hint), least loaded first.
func (x *exchange) inRotation(exclude *router.Replica, n int) []string {
	var reps []*router.Replica
	for _, r := range x.s.core.Replicas() {
		if r != exclude && r.Healthy() && !slices.Contains(x.pr.Skip, r.Rank()) {
			reps = append(reps, r)
		}
	}
	slices.SortStableFunc(reps, func(a, b *router.Replica) int { return a.InFlight() - b.InFlight() })
	var out []string
	for _, r := range reps[:min(len(reps), n)] {
		out = append(out, r.URL().Host)
	}
	return out
}

// refuse answers the request at once with code and msg in the shape of
// the API called.
func (x *exchange) refuse(code int, msg string) ([]*extprocv3.ProcessingResponse, error) {
	x.decided = true
	x.s.log.Info("request answered by the endpoint picker", "status", code, "reason", msg, "path", x.path)
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
				Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}},
			Body:    apierr.Body(x.path, code, msg),
			Details: "warden_epp",
		}}}}, nil
}

// responseHeaders reads the answer's status and the endpoint that served
// it, re-accounts a request the gateway sent to a fallback, and tells the
// client where it went (X-Warden-Replica, X-Warden-Route).
func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders, md *corev3.Metadata) []*extprocv3.ProcessingResponse {
	x.replied = true
	sse := false
	for _, kv := range h.GetHeaders().GetHeaders() {
		v := kv.GetValue()
		if v == "" {
			v = string(kv.GetRawValue())
		}
		switch strings.ToLower(kv.GetKey()) {
		case ":status":
			x.status, _ = strconv.Atoi(v)
		case "content-type":
			sse = strings.HasPrefix(v, "text/event-stream")
		}
	}
	served := md.GetFilterMetadata()[LBNamespace].GetFields()[ServedKey].GetStringValue()
	if x.placed && served != "" && served != x.pl.Replica.URL().Host {
		x.moved(served)
	}
	var set []*corev3.HeaderValueOption
	if x.placed {
		if x.status == http.StatusOK && x.kind != tap.None {
			// The usage chunk the picker asked for is dropped from what the
			// client gets, as serve does; only where the picker hands the
			// answer on (full-duplex), not where the gateway streams it.
			x.tap = tap.New(nil, x.kind, tap.Options{Stream: x.stream, Strip: x.strip && x.respDuplex && sse, Now: x.s.core.Now})
		}
		set = []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: strings.ToLower(identity.PinHeader), RawValue: []byte(strconv.Itoa(x.pl.Rank))}},
			{Header: &corev3.HeaderValue{Key: "x-warden-route", RawValue: []byte(x.pl.Reason)}},
		}
	}
	if h.GetEndOfStream() { // headers only (a 500 with no body): the answer is whole
		x.end(nil)
	}
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}}}}}
}

// moved accounts a request the gateway served elsewhere than the pick (it
// retried on a fallback): the core ends the pick, which never reached its
// engine, and places the request on the endpoint that served, in one call
// (router.ServedElsewhere).
func (x *exchange) moved(served string) {
	pl := x.s.core.Finish(&x.pl, router.Outcome{Retry: router.ServedElsewhere, ServedOn: served, Request: x.pr})
	x.pl, x.placed = pl, pl.Rank >= 0
}

// end accounts the request once, when its answer ended or its stream did
// (err: why the stream ended early).
func (x *exchange) end(err error) {
	if x.finish || !x.placed {
		return
	}
	x.finish = true
	o := router.Outcome{Status: x.status, Start: x.start, Key: x.key, RequestID: x.id}
	if err != nil {
		// The stream ended before the answer did: the client gave up (the
		// gateway half-closes or resets the stream) or the gateway went
		// away. The client's 499, as `warden serve` records it: an engine
		// that fails answers through the gateway with a status (Envoy's own
		// 503 for one it cannot reach), which is accounted as the engine's.
		o.Status = 499
		x.s.log.Debug("the stream ended before the answer", "replied", x.replied, "error", err)
	}
	if x.tap != nil {
		x.tap.End(nil)
		o.Usage, o.FirstByte, o.FirstToken = x.tap.Usage(), x.tap.FirstByte(), x.tap.FirstToken()
	}
	x.s.core.Finish(&x.pl, o)
}

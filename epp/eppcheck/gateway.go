package eppcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The protocol's names (GIE's endpoint-picker protocol), spelled here so
// that the check depends on no picker's code.
const (
	destinationHeader = "x-gateway-destination-endpoint"
	lbNamespace       = "envoy.lb"
	servedKey         = "x-gateway-destination-endpoint-served"
	subsetNamespace   = "envoy.lb.subset_hint"
	subsetKey         = "x-gateway-destination-endpoint-subset"
	extProcService    = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// mode is how the gateway sends bodies: the protocol's full-duplex
// streamed mode, or buffered request bodies with streamed answers (what a
// fail-open Envoy uses, since Envoy 1.40 fails closed in full-duplex mode).
type mode int

const (
	duplex mode = iota
	buffered
)

func (m mode) String() string {
	if m == buffered {
		return "buffered"
	}
	return "full-duplex"
}

// abort is where the client goes away.
type abort int

const (
	noAbort      abort = iota
	abortHalf          // after the pick, before the first answer byte: the gateway half-closes the stream (Envoy's way)
	abortCancel        // after the pick, before the first answer byte: the stream is reset
	abortMidBody       // after the answer's headers and a first body piece
)

// turn is one HTTP request as the gateway plays it to the picker.
type turn struct {
	mode     mode
	method   string
	path     string
	headers  []string // name, value pairs
	chunks   [][]byte // the request body as the client sent it; nil = no body (headers end the stream)
	trailers bool     // the request ends with trailers (the body does not carry end_of_stream)
	subset   *structpb.Value
	abort    abort
	// The answer the gateway plays back: status, body pieces, and the
	// endpoint it reports as served ("" = the first picked).
	status    int
	answer    [][]byte
	servedOn  string
	noMessage bool // the answer has headers only (end_of_stream on them)
}

// outcome is what the picker said during a turn.
type outcome struct {
	immediate *extprocv3.ImmediateResponse
	header    string // the destination header's value
	metadata  string // the destination in envoy.lb metadata
	headerSet bool
	body      []byte // the request body the picker handed back (full-duplex) or the body mutation (buffered)
	mutated   bool   // buffered: the picker replaced the body
	answer    []byte // the answer body as it reaches the client (full-duplex: what came back)
}

// endpoints is the picked endpoints, first the pick.
func (o *outcome) endpoints() []string {
	var out []string
	for _, e := range strings.Split(o.header, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func hdrs(kv []string, eos bool) *extprocv3.HttpHeaders {
	var hs []*corev3.HeaderValue
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: eos}
}

func (m mode) protocol() *extprocv3.ProtocolConfiguration {
	if m == buffered {
		return &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED,
			ResponseBodyMode: filterv3.ProcessingMode_STREAMED}
	}
	return &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}
}

// errProtocol marks a picker's answer the protocol does not allow.
var errProtocol = errors.New("protocol")

func protoErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errProtocol}, a...)...)
}

// play runs t on a new stream of client, as Envoy 1.40 would: the request
// (headers with the protocol configuration and the subset hint, the body
// in t.chunks, trailers), then, unless the picker answered at once or the
// client aborts first, the answer (headers with the served endpoint, the
// body, end of stream). It checks each answer's message type against the
// mode and returns what the picker said.
func play(ctx context.Context, client extprocv3.ExternalProcessorClient, t turn) (*outcome, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.Process(ctx)
	if err != nil {
		return nil, err
	}
	if t.method == "" {
		t.method = "POST"
	}
	if t.path == "" {
		t.path = "/v1/chat/completions"
	}
	g := &gw{st: st, t: t, o: &outcome{}}
	if err := g.request(); err != nil {
		return g.o, err
	}
	if g.o.immediate != nil {
		return g.o, nil
	}
	switch t.abort {
	case abortHalf: // how the picker ends the stream then is its own affair
		g.closeAndDrain()
		return g.o, nil
	case abortCancel:
		cancel()
		return g.o, nil
	}
	return g.o, g.response()
}

// gw is one stream's gateway side.
type gw struct {
	st extprocv3.ExternalProcessor_ProcessClient
	t  turn
	o  *outcome
}

func (g *gw) send(r *extprocv3.ProcessingRequest) error {
	if err := g.st.Send(r); err != nil {
		if errors.Is(err, io.EOF) { // the real error comes with Recv
			_, err = g.st.Recv()
		}
		return fmt.Errorf("sending %T: %w", r.Request, err)
	}
	return nil
}

func (g *gw) recv(what string) (*extprocv3.ProcessingResponse, error) {
	r, err := g.st.Recv()
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", what, err)
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		g.o.immediate = ir
	}
	g.takePick(r)
	return r, nil
}

// takePick reads the destination from a message's header mutation and
// dynamic metadata.
func (g *gw) takePick(r *extprocv3.ProcessingResponse) {
	var cr *extprocv3.CommonResponse
	switch {
	case r.GetRequestHeaders() != nil:
		cr = r.GetRequestHeaders().GetResponse()
	case r.GetRequestBody() != nil:
		cr = r.GetRequestBody().GetResponse()
	case r.GetRequestTrailers() != nil:
		for _, h := range r.GetRequestTrailers().GetHeaderMutation().GetSetHeaders() {
			if strings.EqualFold(h.GetHeader().GetKey(), destinationHeader) {
				g.o.header, g.o.headerSet = headerValue(h.GetHeader()), true
			}
		}
	}
	for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), destinationHeader) {
			g.o.header, g.o.headerSet = headerValue(h.GetHeader()), true
		}
	}
	if v, ok := r.GetDynamicMetadata().GetFields()[lbNamespace].GetStructValue().GetFields()[destinationHeader]; ok {
		g.o.metadata = v.GetStringValue()
	}
}

func headerValue(h *corev3.HeaderValue) string {
	if h.GetValue() != "" {
		return h.GetValue()
	}
	return string(h.GetRawValue())
}

// request sends the request and reads the picker's answers to it, as the
// mode demands: full-duplex, a headers answer and the body handed back up
// to its end of stream (and the trailers' answer); buffered, a headers
// answer before the body is sent, then the body's answer.
func (g *gw) request() error {
	t := g.t
	hasBody := t.chunks != nil
	kv := append([]string{":method", t.method, ":path", t.path, ":scheme", "http", ":authority", "eppcheck"}, t.headers...)
	var md *corev3.Metadata
	if t.subset != nil {
		md = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			subsetNamespace: {Fields: map[string]*structpb.Value{subsetKey: t.subset}}}}
	}
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hdrs(kv, !hasBody)},
		MetadataContext: md, ProtocolConfig: t.mode.protocol()}
	if err := g.send(first); err != nil {
		return err
	}
	if !hasBody {
		r, err := g.recv("the answer to headers that end the request")
		if err != nil || g.o.immediate != nil {
			return err
		}
		if r.GetRequestHeaders() == nil {
			return protoErr("a request without a body was answered with %T, want request_headers", r.Response)
		}
		return nil
	}
	if t.mode == buffered {
		return g.requestBuffered()
	}
	return g.requestDuplex()
}

func (g *gw) requestDuplex() error {
	t := g.t
	for i, c := range t.chunks {
		eos := i == len(t.chunks)-1 && !t.trailers
		if err := g.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: c, EndOfStream: eos}}}); err != nil {
			return err
		}
	}
	if t.trailers {
		if err := g.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: "x-eppcheck-trailer", RawValue: []byte("1")}}}}}}); err != nil {
			return err
		}
	}
	var gotHeaders, bodyDone, trailersDone bool
	body := []byte{}
	for !(gotHeaders && bodyDone && (trailersDone || !t.trailers)) {
		r, err := g.recv("the pick and the request body handed back")
		if err != nil {
			return err
		}
		switch {
		case g.o.immediate != nil:
			return nil
		case r.GetRequestHeaders() != nil:
			if gotHeaders {
				return protoErr("two request_headers answers")
			}
			gotHeaders = true
			if cr := r.GetRequestHeaders().GetResponse(); cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
				// The body replaced in the headers' answer: nothing more
				// is processed for this request (the trailers go on).
				g.o.body = cr.GetBodyMutation().GetBody()
				return nil
			}
		case r.GetRequestBody() != nil:
			if !gotHeaders {
				return protoErr("the body was handed back before the request_headers answer")
			}
			if bodyDone {
				return protoErr("the body was handed back after its end of stream (the engine would get it twice)")
			}
			sb := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if sb == nil {
				return protoErr("in full-duplex mode the body must come back as streamed_response, got %v", r.GetRequestBody().GetResponse().GetBodyMutation())
			}
			if t.trailers {
				return protoErr("the body was streamed back after the request's trailers had come: Envoy 1.40 then sends it " +
					"to the engine twice when the route has a retry policy (its retry buffer is sent again when the trailers " +
					"continue); answer the trailers' case with request_headers CONTINUE_AND_REPLACE carrying the body")
			}
			body = append(body, sb.GetBody()...)
			bodyDone = sb.GetEndOfStream()
		case r.GetRequestTrailers() != nil:
			trailersDone = true
			if t.trailers {
				bodyDone = true // the trailers end the request
			}
		default:
			return protoErr("unexpected %T while the request was in flight", r.Response)
		}
	}
	g.o.body = body
	return nil
}

func (g *gw) requestBuffered() error {
	t := g.t
	r, err := g.recv("the answer to the request headers (buffered mode: Envoy waits for it before sending the body)")
	if err != nil || g.o.immediate != nil {
		return err
	}
	if r.GetRequestHeaders() == nil {
		return protoErr("buffered mode: the headers were answered with %T, want request_headers", r.Response)
	}
	whole := bytes.Join(t.chunks, nil)
	if err := g.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: whole, EndOfStream: true}}}); err != nil {
		return err
	}
	r, err = g.recv("the answer to the buffered body")
	if err != nil || g.o.immediate != nil {
		return err
	}
	if r.GetRequestBody() == nil {
		return protoErr("buffered mode: the body was answered with %T, want request_body", r.Response)
	}
	g.o.body = whole
	if m := r.GetRequestBody().GetResponse().GetBodyMutation(); m != nil {
		if m.GetStreamedResponse() != nil {
			return protoErr("buffered mode: streamed_response is full-duplex mode's; want body or none")
		}
		g.o.body, g.o.mutated = m.GetBody(), true
	}
	return nil
}

// response plays the answer: headers (with the served endpoint), body
// pieces, end of stream; reads the picker's answer to each.
func (g *gw) response() error {
	t := g.t
	served := t.servedOn
	if served == "" && len(g.o.endpoints()) > 0 {
		served = g.o.endpoints()[0]
	}
	status := t.status
	if status == 0 {
		status = 200
	}
	noBody := t.noMessage || len(t.answer) == 0
	rh := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: hdrs(
		[]string{":status", fmt.Sprint(status), "content-type", "text/event-stream"}, noBody)}}
	if served != "" {
		rh.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			lbNamespace: {Fields: map[string]*structpb.Value{servedKey: structpb.NewStringValue(served)}}}}
	}
	if err := g.send(rh); err != nil {
		return err
	}
	r, err := g.recv("the answer to the response headers")
	if err != nil {
		return err
	}
	if r.GetResponseHeaders() == nil {
		return protoErr("the response headers were answered with %T", r.Response)
	}
	for i, c := range t.answer {
		if noBody {
			break
		}
		last := i == len(t.answer)-1
		if err := g.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: c, EndOfStream: last && t.abort != abortMidBody}}}); err != nil {
			return err
		}
		if err := g.answerBody(); err != nil {
			return err
		}
		if t.abort == abortMidBody {
			g.closeAndDrain()
			return nil
		}
	}
	return g.closeAndDrain()
}

func (g *gw) answerBody() error {
	r, err := g.recv("the answer to a response body piece")
	if err != nil {
		return err
	}
	br := r.GetResponseBody()
	if br == nil {
		return protoErr("a response body piece was answered with %T", r.Response)
	}
	if g.t.mode == duplex {
		sb := br.GetResponse().GetBodyMutation().GetStreamedResponse()
		if sb == nil {
			return protoErr("full-duplex mode: the answer's body must come back as streamed_response (the client gets nothing else)")
		}
		g.o.answer = append(g.o.answer, sb.GetBody()...)
	}
	return nil
}

// closeAndDrain half-closes the stream, as Envoy does when the request is
// over, and waits for the picker to end it.
func (g *gw) closeAndDrain() error {
	if err := g.st.CloseSend(); err != nil {
		return err
	}
	for {
		r, err := g.st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the picker ended the stream with an error after the client half-closed it: %w", err)
		}
		if g.t.abort == noAbort {
			return protoErr("a message (%T) after the exchange was over", r.Response)
		}
	}
}

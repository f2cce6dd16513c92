// Package eppcheck puts an endpoint picker through the situations a real
// gateway and real clients create, speaking Envoy 1.40's side of the
// Gateway API Inference Extension's endpoint-picker protocol (ext_proc
// over gRPC): both body modes, bodies in many pieces and up to a size
// limit, trailers, empty bodies, requests without a body, clients that go
// away before the first byte and in mid-answer, the subset hint, the
// served-endpoint report, immediate answers, the health services and a
// hundred concurrent streams. It is `warden epp check`.
//
// It needs nothing but the picker's gRPC address: no engine is called (the
// gateway, played here, carries the bytes), so it checks any picker, the
// warden's, llm-d's or the GIE reference picker, the same way. It imports
// no picker's code.
package eppcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Defaults of Config's fields.
const (
	DefaultMaxBody    = 4<<20 + 512<<10 // 4.5 MiB: over gRPC's default 4 MiB message limit, as llm-d tests
	DefaultConcurrent = 100
	DefaultTimeout    = 20 * time.Second
	// SessionHeader carries the check's conversations: read by llm-d's
	// agent-identity plugin and by the warden.
	SessionHeader = "x-session-affinity"
)

// Config configures Run.
type Config struct {
	Target string // the picker's gRPC address, HOST:PORT
	// Model is the model name in the request bodies; "" = "eppcheck".
	Model string
	// MaxBody is the largest request body the picker must take; 0 =
	// DefaultMaxBody.
	MaxBody int
	// Concurrent is how many streams run at once in the load check; 0 =
	// DefaultConcurrent.
	Concurrent int
	// Timeout bounds each exchange; 0 = DefaultTimeout. A picker that
	// does not answer within it fails that check.
	Timeout time.Duration
	// Drain, when set, makes the picker drain (for a process: SIGTERM);
	// the last check then watches readiness go NOT_SERVING. nil: that
	// check is reported as not checked.
	Drain func() error
}

// Verdict is one check's result.
type Verdict string

const (
	Pass       Verdict = "PASS"
	Fail       Verdict = "FAIL"
	NotChecked Verdict = "SKIP"
)

// Result is one check: its name, verdict and what was seen.
type Result struct {
	Name    string
	Verdict Verdict
	Detail  string
}

func (r Result) String() string { return fmt.Sprintf("%-4s  %s: %s", r.Verdict, r.Name, r.Detail) }

// ErrNotAPicker is returned when the target does not speak the protocol
// at all (not gRPC, or no ext_proc service).
var ErrNotAPicker = errors.New("not an endpoint picker")

// Run puts the picker at cfg.Target through every check, calling report
// with each result as it comes, and returns them all. The error is
// ErrNotAPicker (wrapped with the reason) when the target cannot be
// checked at all; a failed check is a Result, not an error.
func Run(ctx context.Context, cfg Config, report func(Result)) ([]Result, error) {
	if cfg.Model == "" {
		cfg.Model = "eppcheck"
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Concurrent <= 0 {
		cfg.Concurrent = DefaultConcurrent
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	conn, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotAPicker, cfg.Target, err)
	}
	defer conn.Close()
	c := &checker{cfg: cfg, conn: conn, ext: extprocv3.NewExternalProcessorClient(conn),
		health: healthpb.NewHealthClient(conn), report: report}
	if err := c.reachable(ctx); err != nil {
		return nil, err
	}
	for _, check := range c.checks() {
		if ctx.Err() != nil {
			break
		}
		check(ctx)
	}
	return c.results, nil
}

// checker holds the run's connection, what it learned and its results.
type checker struct {
	cfg     Config
	conn    *grpc.ClientConn
	ext     extprocv3.ExternalProcessorClient
	health  healthpb.HealthClient
	report  func(Result)
	results []Result
	eps     []string // the endpoints the picker named, in order of first sight
	session int      // the check's conversation counter
}

func (c *checker) add(name string, v Verdict, format string, a ...any) {
	r := Result{Name: name, Verdict: v, Detail: fmt.Sprintf(format, a...)}
	c.results = append(c.results, r)
	if c.report != nil {
		c.report(r)
	}
}

// reachable tells a picker from something else at the address: an HTTP/1
// server (an engine's port) fails gRPC's preface; a gRPC server without
// ext_proc answers Unimplemented.
func (c *checker) reachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	st, err := c.ext.Process(ctx)
	if err == nil {
		// An empty stream, closed at once: a picker ends it without error.
		st.CloseSend()
		_, err = st.Recv()
	}
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	switch status.Code(err) {
	case codes.Unimplemented:
		return fmt.Errorf("%w: %s speaks gRPC but has no %s service (%v)", ErrNotAPicker, c.cfg.Target, extProcService, err)
	case codes.Unavailable, codes.DeadlineExceeded:
		msg := err.Error()
		if strings.Contains(msg, "preface") || strings.Contains(msg, "HTTP/1") || strings.Contains(msg, "frame") {
			return fmt.Errorf("%w: %s does not speak gRPC (HTTP/2); it answers like an HTTP/1 server, such as an engine's port, not a picker's gRPC port (%v)",
				ErrNotAPicker, c.cfg.Target, err)
		}
		return fmt.Errorf("%w: %s cannot be reached over gRPC: %v", ErrNotAPicker, c.cfg.Target, err)
	}
	return nil // another error on an empty stream: the service is there
}

func (c *checker) checks() []func(context.Context) {
	return []func(context.Context){
		c.checkHealth,
		c.checkPick(duplex), c.checkPick(buffered),
		// The aborts come early: a picker that blames the engine for them
		// shows it while every endpoint is in rotation.
		c.checkAborts(duplex), c.checkAborts(buffered),
		c.checkLargeBody(duplex), c.checkLargeBody(buffered),
		c.checkTrailers,
		c.checkEmptyBody(duplex), c.checkEmptyBody(buffered),
		c.checkNoBody(duplex), c.checkNoBody(buffered),
		c.checkHeadersOnlyAnswer,
		c.checkSubset,
		c.checkConcurrent,
		// Last before the health: a picker may take an endpoint that the
		// gateway reports it did not reach out of rotation.
		c.checkServed,
		c.checkHealthAfter,
		c.checkDrain,
	}
}

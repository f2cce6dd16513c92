package eppcheck_test

// `warden epp check` against the real thing: a `warden epp` process over
// two `warden sim serve` engines, as CI runs it (go test ./...), and the
// same command against an engine's HTTP port, which is no picker.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lmwarden/warden/epp/eppcheck"
	"github.com/lmwarden/warden/internal/simproc"
)

func TestMain(m *testing.M) { simproc.Main(m) }

// startEPP runs `warden epp` over two simulated engines and returns its
// gRPC address, the engines and the process.
func startEPP(t *testing.T) (string, []*simproc.Proc, *exec.Cmd) {
	t.Helper()
	sims := []*simproc.Proc{simproc.Start(t, "--sim-time-scale", "50"), simproc.Start(t, "--sim-time-scale", "50")}
	grpcPort, httpPort := simproc.FreePort(t), simproc.FreePort(t)
	cmd := exec.Command(simproc.Binary(t), "epp", "--grpc-port", strconv.Itoa(grpcPort), "--port", strconv.Itoa(httpPort),
		"--replica", sims[0].URL, "--replica", sims[1].URL)
	out := &simproc.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("warden epp output:\n%s", out.String())
		}
	})
	simproc.Poll(t, "warden epp ready", func() bool { return strings.Contains(out.String(), "endpoint picker ready") })
	return fmt.Sprintf("127.0.0.1:%d", grpcPort), sims, cmd
}

// checkCmd runs `warden epp check --target target` and returns its output
// and exit code.
func checkCmd(t *testing.T, target string) (string, int) {
	t.Helper()
	out, err := exec.Command(simproc.Binary(t), "epp", "check", "--target", target).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("warden epp check: %v\n%s", err, out)
	return "", -1
}

func TestCheckPassesAgainstWardenEPP(t *testing.T) {
	target, sims, _ := startEPP(t)
	out, code := checkCmd(t, target)
	t.Logf("warden epp check --target %s (exit %d):\n%s", target, code, out)
	if code != 0 {
		t.Fatalf("exit %d against warden epp, want 0", code)
	}
	// Every kind of check ran and passed (a check left out would not fail).
	for _, want := range []string{
		`PASS  health "readiness"`, "PASS  full-duplex: a turn", "PASS  buffered: a turn",
		"PASS  full-duplex: clients that go away", "PASS  buffered: clients that go away",
		"PASS  full-duplex: a 4718592-byte body", "PASS  buffered: a 4718592-byte body",
		"PASS  full-duplex: a body followed by trailers",
		"PASS  full-duplex: an empty chunked POST", "PASS  buffered: an empty chunked POST",
		"PASS  full-duplex: GET /v1/models", "PASS  buffered: GET /v1/models",
		"PASS  an answer with headers only", "PASS  subset hint as a list [", "PASS  subset hint as a string",
		"PASS  subset hint as an empty list", "PASS  100 concurrent streams", "PASS  served-endpoint report",
		"PASS  readiness after the checks", "0 failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output", want)
		}
	}

	// The same command against an engine's HTTP port: not a picker.
	engine := strings.TrimPrefix(sims[0].URL, "http://")
	out, code = checkCmd(t, engine)
	t.Logf("warden epp check --target %s (exit %d):\n%s", engine, code, out)
	if code == 0 || !strings.Contains(out, "not an endpoint picker") || !strings.Contains(out, "does not speak gRPC") {
		t.Errorf("against an engine's HTTP port: exit %d, want non-zero with a line saying it is not a picker", code)
	}
}

// TestCheckSeesReadinessGoWhileDraining drives the drain check, which the
// command cannot: the picker process is sent SIGTERM.
func TestCheckSeesReadinessGoWhileDraining(t *testing.T) {
	target, _, cmd := startEPP(t)
	var drain *eppcheck.Result
	_, err := eppcheck.Run(context.Background(), eppcheck.Config{Target: target, Concurrent: 10,
		Drain: func() error { return cmd.Process.Signal(syscall.SIGTERM) }}, func(r eppcheck.Result) {
		t.Log(r)
		if strings.HasPrefix(r.Name, "readiness NOT_SERVING") {
			drain = &r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if drain == nil || drain.Verdict != eppcheck.Pass {
		t.Fatalf("the drain check: %v", drain)
	}
}

// TestCheckRefusesAGRPCServerWithoutExtProc: a gRPC server that is no
// picker (health only) is told apart from one: ErrNotAPicker naming the
// missing service, no checks run.
func TestCheckRefusesAGRPCServerWithoutExtProc(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(ln)
	defer g.Stop()
	res, err := eppcheck.Run(context.Background(), eppcheck.Config{Target: ln.Addr().String()}, nil)
	if !errors.Is(err, eppcheck.ErrNotAPicker) || !strings.Contains(err.Error(), "envoy.service.ext_proc.v3.ExternalProcessor") || len(res) != 0 {
		t.Errorf("a health-only gRPC server: %d results, %v; want ErrNotAPicker naming the ext_proc service", len(res), err)
	}
}

package realenvoy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/internal/wardenproc"
)

// envoyBin is the Envoy the tier runs, skip why it cannot run.
var envoy struct{ bin, skip string }

func TestMain(m *testing.M) {
	envoy.bin = os.Getenv("WARDEN_ENVOY")
	if envoy.bin == "" {
		_, here, _, _ := runtime.Caller(0)
		envoy.bin, _ = filepath.Abs(filepath.Join(filepath.Dir(here), "..", ".envoy", "bin", "envoy"))
	}
	if out, err := exec.Command(envoy.bin, "--version").CombinedOutput(); err != nil {
		envoy.skip = fmt.Sprintf("real-Envoy tier skipped: no Envoy at %s (%v); run scripts/envoy.sh", envoy.bin, err)
	} else if !strings.Contains(string(out), "/1.40") {
		envoy.skip = fmt.Sprintf("real-Envoy tier skipped: %s is not Envoy 1.40 (%s)", envoy.bin, strings.TrimSpace(string(out)))
	}
	simproc.Main(m)
}

// needEnvoy skips without Envoy, or fails where WARDEN_REQUIRE_ENVOY=1 says
// it must be there (CI: a skipped tier proves nothing).
func needEnvoy(t *testing.T) {
	t.Helper()
	if envoy.skip == "" {
		return
	}
	if os.Getenv("WARDEN_REQUIRE_ENVOY") == "1" {
		t.Fatal(envoy.skip + " (WARDEN_REQUIRE_ENVOY=1)")
	}
	t.Skip(envoy.skip)
}

// farm is engines (simulators) behind `warden epp` behind Envoy.
type farm struct {
	sims     []*simproc.Proc
	epp      *exec.Cmd
	eppOut   *simproc.SyncBuffer
	eppGRPC  string // 127.0.0.1:port
	eppHTTP  string // http://127.0.0.1:port
	envoyURL string // http://127.0.0.1:port
	envoyOut *simproc.SyncBuffer
	admin    string   // Envoy's admin interface, http://127.0.0.1:port
	model    string   // what claudeTurn asks for; "" = Claude Code's name, mapped by the picker
	eppFlags []string // more flags for warden epp (after the defaults: they win)
}

// simArgs: fast engines that report cached prompt tokens, as `warden serve`
// starts them.
var simArgs = []string{"--sim-time-scale", "50", "--enable-prompt-tokens-details", "--max-num-seqs", "32"}

// newFarm starts n simulators, the picker over them and Envoy in front, with
// the bootstrap `warden epp envoy-config` prints (extra config flags after
// the defaults).
func newFarm(t *testing.T, n int, configFlags ...string) *farm {
	t.Helper()
	needEnvoy(t)
	f := &farm{}
	var replicas []string
	for range n {
		s := simproc.Start(t, simArgs...)
		f.sims = append(f.sims, s)
		replicas = append(replicas, "--replica", s.URL)
	}
	f.startEPP(t, replicas)
	f.startEnvoy(t, replicas, configFlags)
	return f
}

func (f *farm) startEPP(t *testing.T, replicas []string) {
	t.Helper()
	grpcPort, httpPort := simproc.FreePort(t), simproc.FreePort(t)
	f.eppGRPC, f.eppHTTP = fmt.Sprintf("127.0.0.1:%d", grpcPort), fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	args := append([]string{"epp", "--grpc-port", strconv.Itoa(grpcPort), "--port", strconv.Itoa(httpPort),
		"--scrape-interval", "200ms", "--max-body-bytes", "1MiB"}, replicas...)
	args = append(args, f.eppFlags...)
	f.epp = exec.Command(simproc.Binary(t), args...)
	f.eppOut = &simproc.SyncBuffer{}
	f.epp.Stdout, f.epp.Stderr = f.eppOut, f.eppOut
	if err := f.epp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.epp.Process.Kill()
		f.epp.Wait()
		if t.Failed() {
			t.Logf("warden epp output:\n%s", f.eppOut.String())
		}
	})
	simproc.Poll(t, "warden epp ready", func() bool { return strings.Contains(f.eppOut.String(), "endpoint picker ready") })
}

func (f *farm) startEnvoy(t *testing.T, replicas, configFlags []string) {
	t.Helper()
	port, admin := simproc.FreePort(t), simproc.FreePort(t)
	args := append([]string{"epp", "envoy-config", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--epp", f.eppGRPC,
		"--admin", fmt.Sprintf("127.0.0.1:%d", admin)}, replicas...)
	cfg, err := exec.Command(simproc.Binary(t), append(args, configFlags...)...).Output()
	if err != nil {
		t.Fatalf("warden epp envoy-config: %v", err)
	}
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(envoy.bin, "-c", path, "--base-id", strconv.Itoa(1000+rand.IntN(1_000_000)), "-l", "warning",
		"--disable-hot-restart")
	f.envoyOut = &simproc.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = f.envoyOut, f.envoyOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("envoy output:\n%s", f.envoyOut.String())
		}
	})
	f.envoyURL, f.admin = fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("http://127.0.0.1:%d", admin)
	simproc.Poll(t, "Envoy live", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", admin))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// turn is one answered request.
type turn struct {
	status  int
	replica string // X-Warden-Replica: where the picker placed it ("" without a pick)
	route   string
	prompt  int64
	cached  int64
	body    string
}

// claudeTurn sends one Claude-Code-like streamed /v1/messages turn of a
// conversation: Claude Code's model name (the picker maps it to the one the
// engines serve, as `warden serve` does), its session header, a long system
// prompt, the history of n user turns.
func (f *farm) claudeTurn(t *testing.T, session string, n int) turn {
	t.Helper()
	var msgs []string
	for i := range n {
		if i > 0 {
			msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"done with step %d"}`, i))
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"step %d of %s: %s"}`, i, session, strings.Repeat("read the file and fix it ", 20)))
	}
	model := f.model
	if model == "" {
		model = "claude-sonnet-4-5-20250929"
	}
	body := fmt.Sprintf(`{"model":%q,"max_tokens":16,"stream":true,"system":"You are Claude Code. %s","messages":[%s]}`,
		model, strings.Repeat("Follow the rules. ", 150), strings.Join(msgs, ","))
	return f.post(t, "/v1/messages", body, "x-claude-code-session-id", session)
}

func (f *farm) post(t *testing.T, path, body string, kv ...string) turn {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, f.envoyURL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s through Envoy: %v", path, err)
	}
	defer resp.Body.Close()
	out := turn{status: resp.StatusCode, replica: resp.Header.Get("X-Warden-Replica"), route: resp.Header.Get("X-Warden-Route")}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var all strings.Builder
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		for _, p := range []string{"message.usage", "usage"} {
			u := gjson.Get(data, p)
			if v := u.Get("input_tokens"); v.Exists() {
				out.prompt = v.Int() + u.Get("cache_read_input_tokens").Int()
			}
			if v := u.Get("cache_read_input_tokens"); v.Exists() {
				out.cached = v.Int()
			}
		}
	}
	out.body = all.String()
	return out
}

// status is the picker's /warden/status.
func (f *farm) status(t *testing.T) gjson.Result {
	t.Helper()
	resp, err := http.Get(f.eppHTTP + "/warden/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return gjson.ParseBytes(b)
}

// health asks the picker's gRPC health service.
func (f *farm) health(t *testing.T, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(f.eppGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("gRPC health %q: %v", service, err)
	}
	return resp.GetStatus()
}

// pickerReady reports whether the picker's HTTP side answers /health 200.
func (f *farm) pickerReady() bool {
	h, err := wardenproc.Check(context.Background(), &http.Client{Timeout: time.Second}, f.eppHTTP)
	return err == nil && h.OK()
}

package serve

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/internal/simproc"
)

func TestCheckKVOffloadRefusals(t *testing.T) {
	tests := []struct {
		name string
		cfg  Options
		want string // part of the error; "" none
	}{
		{"off", Options{KVOffload: "off", Device: "cpu"}, ""},
		{"auto on GPUs", Options{KVOffload: "auto", Device: "gpu", Engine: "vllm"}, ""},
		{"a size with the simulator", Options{KVOffload: "8GiB", Device: "gpu", Engine: "sim"}, ""},
		{"vLLM's CPU platform", Options{KVOffload: "auto", Device: "cpu", Engine: "vllm"},
			"--kv-offload auto with --device cpu: vLLM's native KV offloading runs on CUDA, ROCm and XPU GPUs only"},
		{"a connector of the user's", Options{KVOffload: "16GiB", Device: "gpu", Engine: "vllm",
			Extra: []string{"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`}},
			"would replace that connector"},
		{"a connector of the user's, underscores", Options{KVOffload: "16GiB", Device: "gpu", Engine: "vllm",
			Extra: []string{`--kv_transfer_config={"kv_connector":"NixlConnector"}`}}, "would replace that connector"},
		{"their connector without the tier is theirs", Options{KVOffload: "off", Device: "gpu", Engine: "vllm",
			Extra: []string{"--kv-transfer-config", "{}"}}, ""},
		{"not a size", Options{KVOffload: "big", Device: "gpu"}, `--kv-offload: "big" is not a size`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkKVOffload(tt.cfg)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("checkKVOffload = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestEngineSpecsPassTheTierToEveryRank(t *testing.T) {
	cfg := Options{Model: "m", ServedName: "m", DP: 3, TP: 2, Engine: "vllm", VLLMPath: "vllm", LogDir: t.TempDir()}
	d := engineplan.Devices{GPUs: [][]string{{"GPU-a", "GPU-b"}, {"GPU-c", "GPU-d"}, {"GPU-e", "GPU-f"}}, Seqs: 256, Offload: 40 << 30}
	specs, _, err := engineSpecs(cfg, d, engineplan.ToolsChoice{}, engineplan.ContextChoice{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		argv := strings.Join(s.Argv, " ")
		if !strings.Contains(argv, "--tensor-parallel-size 2 --enable-prompt-tokens-details --kv-offloading-backend native --kv-offloading-size 40") {
			t.Errorf("rank %d: %s", s.Rank, argv)
		}
	}
}

// TestServeRefusesKVOffloadOnCPUs runs the binary: the refusal comes before
// any engine or vLLM lookup, with exit status 2 (a usage error).
func TestServeRefusesKVOffloadOnCPUs(t *testing.T) {
	for _, args := range [][]string{
		{"--device", "cpu", "--kv-offload", "auto"},
		{"--kv-offload", "off", "--", "--kv-offloading-size", "4"},
	} {
		argv := append([]string{"serve", "--model", "demo", "--vllm", "/nonexistent/vllm",
			"--port", strconv.Itoa(simproc.FreePort(t)), "--log-dir", t.TempDir()}, args...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, simproc.Binary(t), argv...).CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%q: want exit 2, got %v\n%s", args, err, out)
		}
		if !strings.Contains(string(out), "--kv-offload") {
			t.Errorf("%q: the error does not name --kv-offload:\n%s", args, out)
		}
	}
}

// TestServeSimHostKVTier runs `warden serve --engine sim --kv-offload`: the
// simulator's tier shows in the status and in the exit summary.
func TestServeSimHostKVTier(t *testing.T) {
	w := startServe(t, "--dp", "2", "--kv-offload", "2GiB")
	st := w.status(t)
	if !st.HasOffload() {
		t.Fatalf("no replica shows a host KV tier: %+v\n%s", st.Replicas, w.stderr)
	}
	for _, r := range st.Replicas {
		if r.OffloadBackend != "native" || r.OffloadBytes != 0 && r.OffloadBytes != 2<<30 {
			t.Errorf("replica %d: backend %q, %d bytes; want native, 2 GiB (or unknown)", r.Rank, r.OffloadBackend, r.OffloadBytes)
		}
	}
	w.stop(t)
	for _, want := range []string{"host KV tier (vLLM native KV offloading): 2.0 GiB a rank", "host tier"} {
		if !strings.Contains(w.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, w.stderr)
		}
	}
}

// TestServeRemovesTheTierFileOfAKilledEngine: an engine that backs its host
// KV tier with a /dev/shm file and leaves it when killed (vLLM 0.27 and
// 0.28; the simulator's --sim-offload-file keep) is SIGKILLed: once its
// processes are gone the warden removes the file, its restart makes a new
// one, and a clean stop leaves none.
func TestServeRemovesTheTierFileOfAKilledEngine(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("WARDEN_SIM_SHM_DIR", dir)
	files := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "vllm_offload_*.mmap"))
		return m
	}
	w := startServe(t, "--dp", "1", "--kv-offload", "1GiB", "--", "--sim-offload-file", "keep")
	first := files()
	if len(first) != 1 {
		t.Fatalf("tier files %q, want the engine's one", first)
	}
	port := w.status(t).Replicas[0].Port
	if err := syscall.Kill(int(enginePID(t, w, port)), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	simproc.Poll(t, "the killed engine's tier file removed and the restarted engine's made", func() bool {
		now := files()
		return len(now) == 1 && now[0] != first[0] && w.status(t).Replicas[0].Up
	})
	if !strings.Contains(w.stderr.String(), "removed the host KV tier file the engine left in /dev/shm") {
		t.Errorf("the removal is not logged:\n%s", w.stderr)
	}
	w.stop(t)
	if left := files(); len(left) != 0 {
		t.Errorf("after a clean stop: %q", left)
	}
}

// testRouter is a valid Router of the flags' defaults.
var testRouter = Router{Host: "127.0.0.1", Port: 8000, Policy: "adaptive", Affinity: true, BalancerInterval: 100 * time.Millisecond, ScrapeInterval: time.Second,
	Subagents: "own", RampUp: 30 * time.Second, MaxBodyBytes: "32MiB", ResponseHeaderTimeout: time.Minute,
	DecisionLogMaxMB: 100, DrainTimeout: time.Second}

// TestKVOffloadDefault: not given, --kv-offload is auto for vLLM on GPUs and
// off for vLLM's CPU build and the simulator; the default auto never stops
// a start: where an explicit auto is an error (the engines' version
// unknown), or the user gave a connector of theirs, it runs without a tier
// and says why, and the overcommit warning points at the start log.
func TestKVOffloadDefault(t *testing.T) {
	for _, c := range []struct{ engine, device, want string }{
		{"vllm", "gpu", "auto"}, {"vllm", "cpu", "off"}, {"sim", "gpu", "off"},
	} {
		cfg, err := Options{Model: "m", DP: 1, TP: 1, Engine: c.engine, Device: c.device, CPUKVCache: "auto", Tools: "auto", Reasoning: "auto", Router: testRouter}.Config()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.KVOffload != c.want || !cfg.KVOffloadDefault {
			t.Errorf("%s on %s: --kv-offload %q (default %v), want %q", c.engine, c.device, cfg.KVOffload, cfg.KVOffloadDefault, c.want)
		}
	}
	cfg, err := Options{Model: "m", DP: 1, TP: 1, Engine: "vllm", Device: "gpu", KVOffload: "auto", Tools: "auto", Reasoning: "auto", Router: testRouter}.Config()
	if err != nil || cfg.KVOffloadDefault {
		t.Errorf("an explicit auto taken for the default: %v %v", cfg.KVOffloadDefault, err)
	}

	user, err := Options{Model: "m", DP: 1, TP: 1, Engine: "vllm", Device: "gpu", Tools: "auto", Reasoning: "auto",
		Router: testRouter, Extra: []string{"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1"}`}}.Config()
	if err != nil || user.KVOffload != "off" {
		t.Errorf("the default over a connector of the user's: --kv-offload %q, %v; want off", user.KVOffload, err)
	}
}

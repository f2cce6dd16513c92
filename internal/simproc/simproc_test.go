package simproc_test

import (
	"syscall"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestMain(m *testing.M) { simproc.Main(m) }

func TestStartMetricsKill(t *testing.T) {
	p := simproc.Start(t, "--sim-kv-tokens", "32000")
	m := p.Metrics(t)
	for _, name := range []string{"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total",
		"vllm:time_to_first_token_seconds_count", "vllm:cache_config_info"} {
		if _, ok := m[name]; !ok {
			t.Errorf("metrics lack %s: %v", name, m)
		}
	}
	p.Kill()
	if p.Cmd.ProcessState == nil || p.Cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("process state after Kill: %v", p.Cmd.ProcessState)
	}
	p.Kill() // idempotent
}

func TestStartFailsFastOnExit(t *testing.T) {
	p := simproc.StartNoWait(t, "--sim-profile", "nope")
	if err := p.WaitHealthy(30e9); err == nil {
		t.Fatal("a sim with a bad flag became healthy")
	}
	if p.Cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("exit code %d, want 1", p.Cmd.ProcessState.ExitCode())
	}
}

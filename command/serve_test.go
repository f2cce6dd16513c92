package command

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/serve"
)

// parseRoute runs the route command's flag parsing on args and returns the
// validated config.
func parseRoute(t *testing.T, args ...string) (serve.RouteConfig, error) {
	t.Helper()
	var cfg serve.RouteConfig
	var cfgErr error
	cmd := routeCommand()
	cmd.Action = func(c *cli.Context) error { cfg, cfgErr = routeOptions(c).Config(); return nil }
	app := &cli.App{Name: "warden", Commands: []*cli.Command{cmd}, Writer: io.Discard, ErrWriter: io.Discard}
	if err := app.Run(append([]string{"warden", "route"}, args...)); err != nil {
		return cfg, err
	}
	return cfg, cfgErr
}

func TestRouteConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "replicas")
	os.WriteFile(file, []byte("# fleet\nhttp://10.0.0.7:8000#max_num_seqs=64\n\n  http://10.0.0.8:8000/  \n"), 0o600)
	t.Setenv("XDG_STATE_HOME", dir)
	cfg, err := parseRoute(t, "--replica", "http://10.0.0.5:8000,http://10.0.0.6:8000", "--replicas-file", file,
		"--max-num-seqs", "128", "--port", "9100")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range cfg.Replicas {
		got = append(got, fmt.Sprintf("%d %s %d/%d probe=%v", b.Rank, b.URL, b.MaxNumSeqs, b.FallbackMaxNumSeqs, b.Probe))
	}
	want := []string{"0 http://10.0.0.5:8000 0/128 probe=true", "1 http://10.0.0.6:8000 0/128 probe=true",
		"2 http://10.0.0.7:8000 64/128 probe=true", "3 http://10.0.0.8:8000 0/128 probe=true"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("replicas:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if wantState := filepath.Join(dir, "warden", "route-9100.sessions.json"); cfg.StateFile != wantState || cfg.Addr != "127.0.0.1:9100" {
		t.Errorf("state file %s addr %s, want %s 127.0.0.1:9100", cfg.StateFile, cfg.Addr, wantState)
	}
	if cfg.Core.BalancerInterval != 100*time.Millisecond || cfg.Core.Policy != place.PolicyAdaptive {
		t.Errorf("defaults: balancer interval %v policy %s, want 100ms adaptive", cfg.Core.BalancerInterval, cfg.Core.Policy)
	}
	if cfg, _ := parseRoute(t, "--replica", "http://h:1", "--balancer-interval", "1s", "--affinity=false"); cfg.Core.BalancerInterval != time.Second || cfg.Core.Policy != place.PolicyOff {
		t.Errorf("--balancer-interval 1s --affinity=false: %v %s", cfg.Core.BalancerInterval, cfg.Core.Policy)
	}
	if cfg.Core.AdmitWait != 0 || cfg.Core.MoveCooldown != 0 || cfg.Core.KVFill != 0 {
		t.Errorf("adaptive knobs default to auto (0), got %v %d %v", cfg.Core.AdmitWait, cfg.Core.MoveCooldown, cfg.Core.KVFill)
	}
	t.Setenv("WARDEN_KV_FILL", "0.9")
	if cfg, err := parseRoute(t, "--replica", "http://h:1", "--admit-wait", "-1s", "--move-cooldown", "5"); err != nil ||
		cfg.Core.AdmitWait != -time.Second || cfg.Core.MoveCooldown != 5 || cfg.Core.KVFill != 0.9 {
		t.Errorf("--admit-wait -1s --move-cooldown 5 WARDEN_KV_FILL=0.9: %v %d %v (%v)", cfg.Core.AdmitWait, cfg.Core.MoveCooldown, cfg.Core.KVFill, err)
	}
	t.Setenv("WARDEN_KV_FILL", "")
	if cfg, err := parseRoute(t, "--replica", "http://h:1", "--max-body-bytes", "1MiB"); err != nil || cfg.Core.MaxBodyBytes != 1<<20 {
		t.Errorf("--max-body-bytes 1MiB: %d (%v)", cfg.Core.MaxBodyBytes, err)
	}
	if cfg, _ := parseRoute(t, "--replica", "http://h:1", "--state-file", "none"); cfg.StateFile != "" {
		t.Errorf("--state-file none: %q, want no state file", cfg.StateFile)
	}

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, "at least one running server"},
		{[]string{"--replica", "gpu-box:8000"}, "want an http(s) URL"},
		{[]string{"--replica", "http://h:1", "--replica", "http://H:1/"}, "listed twice"},
		{[]string{"--replicas-file", filepath.Join(dir, "missing")}, "--replicas-file"},
		{[]string{"--replica", "http://h:1", "--max-num-seqs", "0"}, "--max-num-seqs must be at least 1"},
		{[]string{"--replica", "http://h:1", "--policy", "random"}, "unknown policy"},
		{[]string{"--replica", "http://h:1", "--port", "70000"}, "not a TCP port"},
		{[]string{"--replica", "http://h:1", "--state-interval", "0s"}, "--state-interval must be positive"},
		{[]string{"--replica", "http://h:1", "--balancer-interval", "-1s"}, "--balancer-interval must be >= 0"},
		{[]string{"--replica", "http://h:1", "--move-cooldown", "-1"}, "--move-cooldown must be >= 0"},
		{[]string{"--replica", "http://h:1", "--kv-fill", "5"}, "--kv-fill must be a fraction"},
		{[]string{"--replica", "http://h:1", "--kv-fill", "-0.5"}, "--kv-fill must be a fraction"},
		{[]string{"--replica", "http://h:1", "--max-body-bytes", "lots"}, "--max-body-bytes"},
	} {
		if _, err := parseRoute(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("route %v: error %v, want one containing %q", tc.args, err, tc.err)
		}
	}
}

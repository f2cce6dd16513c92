package sweep

import (
	"bytes"
	"encoding/csv"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/bench"
	"github.com/lmwarden/warden/internal/simproc"
)

func TestMain(m *testing.M) { simproc.Main(m) }

func TestParseLayouts(t *testing.T) {
	got, err := parseLayouts(" 4x1, 2X2,1x4 ")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Layout{{4, 1}, {2, 2}, {1, 4}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "4", "4x", "x2", "0x1", "2x0", "ax1", "2x2,2x2", "4x1x1"} {
		if _, err := parseLayouts(bad); err == nil {
			t.Errorf("parseLayouts(%q) = nil error", bad)
		}
	}
}

func TestSplitServeArgs(t *testing.T) {
	serve, engine, err := splitServeArgs([]string{"--model", "m", "--engine", "sim", "--", "--sim-time-scale", "10"})
	if err != nil || !cmp.Equal(serve, []string{"--model", "m", "--engine", "sim"}) || !cmp.Equal(engine, []string{"--sim-time-scale", "10"}) {
		t.Errorf("got %q %q %v", serve, engine, err)
	}
	if got := simTimeScale(engine); got != 10 {
		t.Errorf("simTimeScale = %v, want 10", got)
	}
	if got := simTimeScale([]string{"--sim-time-scale=20"}); got != 20 {
		t.Errorf("simTimeScale(=20) = %v", got)
	}
	for _, reserved := range []string{"--dp", "--tp=2", "--port", "--log-dir"} {
		if _, _, err := splitServeArgs([]string{"--model", "m", reserved, "1"}); err == nil || !strings.Contains(err.Error(), "set by the sweep") {
			t.Errorf("%s: err = %v, want it refused", reserved, err)
		}
	}
	// The engines may take a flag of that name: after the second -- it is theirs.
	if _, _, err := splitServeArgs([]string{"--model", "m", "--", "--port", "1"}); err != nil {
		t.Errorf("an engine argument was refused: %v", err)
	}
}

func TestSessionsFitAndWorkingSet(t *testing.T) {
	turns := []bench.TurnRecord{
		{Sessions: 8, SessionID: "a", PromptTokens: 10000, OutputTokens: 256},
		{Sessions: 8, SessionID: "a", PromptTokens: 12244, OutputTokens: 256, LastTurn: true},
		{Sessions: 8, SessionID: "b", PromptTokens: 9000, OutputTokens: 256}, // not finished: ignored while some are
		{Sessions: 8, SessionID: "c", PromptTokens: 14000, OutputTokens: 256, Subagent: true},
		{Sessions: 4, SessionID: "d", PromptTokens: 30000, OutputTokens: 256, LastTurn: true}, // another stage
	}
	if got := workingSet(turns, 8); got != 12500 {
		t.Errorf("workingSet = %d, want 12500 (a's largest turn)", got)
	}
	if got := workingSet(turns[2:3], 8); got != 9256 {
		t.Errorf("workingSet with no finished session = %d, want 9256", got)
	}
	// The reference: 12.5k a conversation, 3.5k of it the shared prompt, on
	// 38k-token replicas: (38000-3500)/9000 = 3 each.
	if got := sessionsFit(4, 38000, 12500, 3500); got != 12 {
		t.Errorf("sessionsFit = %d, want 12", got)
	}
	if got := sessionsFit(4, 38000, 0, 3500); got != 0 {
		t.Errorf("sessionsFit without a working set = %d, want 0", got)
	}
}

func TestVerdicts(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rows := []Row{
		{Layout: "4x1", Sessions: 16, OutputPerMin: 10000, TTFBP50: f(4), TTFBP95: f(10), PrefixHitPct: f(70)},
		{Layout: "2x2", Sessions: 16, OutputPerMin: 12000, TTFBP50: f(2), TTFBP95: f(12), PrefixHitPct: f(80)},
		{Layout: "1x4", SkippedReason: "out of memory"},
	}
	got := verdicts(rows)
	want := []string{"16 sessions: 2x2 best on output (12000 tok/min, +20 % against 4x1's 10000 tok/min); " +
		"2x2 best on TTFB p50 (2.00 s, -50 % against 4x1's 4.00 s); " +
		"4x1 best on TTFB p95 (10.00 s, -17 % against 2x2's 12.00 s); " +
		"2x2 best on prefix hits (80.0 %, +10.0 points against 4x1's 70.0 %)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestSweepOnTheSimulator runs `warden sweep` for real: two layouts of the
// simulator that start and one that cannot (3 cards a replica: 32
// attention heads do not divide by 3), a short bench on each. It checks the
// table's rows and verdicts, the skip with the engine's reason, the files,
// and that no process is left.
func TestSweepOnTheSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three wardens")
	}
	out := t.TempDir()
	cmd := exec.Command(simproc.Binary(t), "sweep", "--layouts", "2x1,1x2,1x3", "--stages", "2", "--stage", "30s",
		"--no-progress", "--out", out, "--",
		"--model", "Qwen/Qwen3-4B-Instruct-2507", "--engine", "sim", "--max-num-seqs", "32", "--stop-grace", "5s",
		"--", "--sim-time-scale", "20")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen := map[int32]bool{}
	var kids []int32
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(3 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for polling := true; polling; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("sweep: %v\n%s\n%s", err, stdout.String(), stderr.String())
			}
			polling = false
		case <-tick.C:
			for _, pid := range simproc.Descendants(int32(cmd.Process.Pid)) {
				if !seen[pid] {
					seen[pid] = true
					kids = append(kids, pid)
				}
			}
		case <-deadline:
			t.Fatalf("sweep still running after 3 minutes\n%s", stderr.String())
		}
	}
	t.Logf("sweep took %v; %d processes seen below it", time.Since(start).Round(time.Second), len(kids))
	if len(kids) < 3 {
		t.Errorf("saw %d processes below the sweep, want serve and its engines", len(kids))
	}
	simproc.WaitGone(t, kids)

	f, err := os.Open(filepath.Join(out, "sweep.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	if len(recs) != 4 {
		t.Fatalf("sweep.csv has %d rows, want header + 2 layouts x 1 stage + 1 skipped:\n%v", len(recs), recs)
	}
	kv := map[string]string{}
	for _, r := range recs[1:] {
		kv[r[col["layout"]]] = r[col["kv_tokens_per_replica"]]
		if r[col["layout"]] == "1x3" {
			if !strings.Contains(r[col["skipped"]], "divisible by tensor parallel size (3)") {
				t.Errorf("1x3 skipped for %q, want the engine's reason", r[col["skipped"]])
			}
			continue
		}
		if r[col["skipped"]] != "" || r[col["output_tokens_per_min"]] == "0" || r[col["sessions"]] != "2" {
			t.Errorf("row %v: want a measured 2-session row", r)
		}
	}
	// Two cards a replica hold more than twice one card's KV (the weights
	// are split over them): 146,720 against 45,872 tokens on the default profile.
	if kv["2x1"] != "45872" || kv["1x2"] != "146720" {
		t.Errorf("KV per replica: %v, want 2x1 45872 and 1x2 146720", kv)
	}
	md := stdout.String()
	for _, want := range []string{"| 2x1 | 2 |", "| 1x2 | 2 |", "| 1x3 | skipped: ", "- 2 sessions: "} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	for _, name := range []string{"sweep.md", "sweep.json", "sweep.svg", "2x1/bench/summary.csv", "1x2/warden.log"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Errorf("missing %s: %v", name, err)
		}
	}
	if !strings.Contains(stderr.String(), "layout 2/3: 1x2") || !strings.Contains(stderr.String(), "left") {
		t.Errorf("no progress lines on stderr:\n%s", stderr.String())
	}
}

// TestSweepInterruptedStopsTheLayoutUnderTest: SIGINT during a layout's
// bench stops its warden and engines; the sweep exits 130 with the partial
// results written.
func TestSweepInterruptedStopsTheLayoutUnderTest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a warden")
	}
	out := t.TempDir()
	cmd := exec.Command(simproc.Binary(t), "sweep", "--layouts", "2x1,1x2", "--stages", "2", "--stage", "10m",
		"--no-progress", "--out", out, "--",
		"--model", "Qwen/Qwen3-4B-Instruct-2507", "--engine", "sim", "--stop-grace", "5s", "--", "--sim-time-scale", "10")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr := &simproc.SyncBuffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var kids []int32
	simproc.Poll(t, "the first layout's engines and bench running", func() bool {
		kids = simproc.Descendants(int32(cmd.Process.Pid))
		return len(kids) >= 3 && strings.Contains(stderr.String(), "tokenizer")
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("sweep exited with %v, want 130\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("sweep did not exit after SIGINT\n%s", stderr.String())
	}
	simproc.WaitGone(t, kids)
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("no interruption message:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "sweep.md")); err != nil {
		t.Errorf("partial results not written: %v", err)
	}
	if strings.Contains(stderr.String(), "layout 2/2") {
		t.Errorf("the sweep went on to the next layout after SIGINT:\n%s", stderr.String())
	}
}

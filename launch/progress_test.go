package launch

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/enginelog"
)

func progressRanks() []*rank {
	start := time.Now()
	loading := &proc{tail: enginelog.NewTail(io.Discard), exited: make(chan struct{})}
	loading.tail.Write([]byte("INFO Loading safetensors checkpoint shards: 50% Completed | 1/2\n"))
	return []*rank{
		{spec: Spec{Rank: 0, Port: 8100, GPUs: []string{"0"}}, state: Ready, since: start.Add(1500 * time.Millisecond)},
		{spec: Spec{Rank: 1, Port: 8101, GPUs: []string{"GPU-0123456789abcdef"}}, state: Loading, since: start, cur: loading},
		{spec: Spec{Rank: 2, Port: 8102}, state: Starting, since: start},
	}
}

func TestProgressPlainPrintsChangesOnly(t *testing.T) {
	var buf bytes.Buffer
	ranks := progressRanks()
	pr := &progress{w: &buf, ranks: ranks, start: ranks[2].since, last: []State{-1, -1, -1}, width: 100}
	pr.draw()
	pr.draw() // nothing changed: nothing printed
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed %d lines, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{
		"rank 0  GPU 0              :8100  healthy    1.5s",
		"rank 1  GPU GPU-012345678… :8101  loading",
		"rank 2  -                  :8102  starting",
	} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want)
		}
	}
	if !strings.HasSuffix(lines[1], "  INFO Loading safetensors checkpoint shards: 50% Completed | 1/2") {
		t.Errorf("loading line lacks the last log line: %q", lines[1])
	}
	ranks[2].state = Ready
	buf.Reset()
	pr.draw()
	if got := strings.TrimSpace(buf.String()); !strings.HasPrefix(got, "rank 2") || strings.Count(got, "\n") != 0 {
		t.Errorf("after one change printed %q, want one line for rank 2", got)
	}
}

func TestProgressTerminalRedrawsInPlace(t *testing.T) {
	var buf bytes.Buffer
	ranks := progressRanks()
	pr := &progress{w: &buf, tty: true, ranks: ranks, start: ranks[2].since, width: 40}
	pr.draw()
	if strings.Contains(buf.String(), "\x1b[3A") {
		t.Error("first draw moved the cursor up")
	}
	buf.Reset()
	pr.draw()
	out := buf.String()
	if !strings.HasPrefix(out, "\x1b[3A") || strings.Count(out, "\r\x1b[2K") != 3 {
		t.Errorf("redraw = %q, want cursor up 3 and 3 cleared lines", out)
	}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		l = strings.TrimPrefix(strings.TrimPrefix(l, "\x1b[3A"), "\r\x1b[2K")
		if n := len([]rune(l)); n > 40 {
			t.Errorf("line of %d runes exceeds the width 40: %q", n, l)
		}
	}
}

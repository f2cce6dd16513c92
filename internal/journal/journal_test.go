//go:build linux

package journal

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// logTo writes one record per level through Handler on a new file, with
// JOURNAL_STREAM naming that file (journal) or another one, and returns
// the lines.
func logTo(t *testing.T, journal bool) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stderr")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	stream := fmt.Sprintf("%d:%d", st.Dev, st.Ino+1) // inherited, not ours
	if journal {
		stream = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	log := slog.New(Handler(f, slog.LevelDebug, func(string) string { return stream })).With("rank", 1)
	log.Debug("polling")
	log.Info("engine healthy")
	log.Warn("engine down; restarting", "reason", "exited with status 1")
	log.Error("engine fails at every start")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestLinesCarryTheirPriorityOnlyOnTheJournalsStream(t *testing.T) {
	want := []string{
		`<7>level=DEBUG msg=polling rank=1`,
		`<6>level=INFO msg="engine healthy" rank=1`,
		`<4>level=WARN msg="engine down; restarting" rank=1 reason="exited with status 1"`,
		`<3>level=ERROR msg="engine fails at every start" rank=1`,
	}
	if d := cmp.Diff(want, logTo(t, true)); d != "" {
		t.Errorf("on the journal's stream (-want +got):\n%s", d)
	}
	for _, line := range logTo(t, false) {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("elsewhere, a line without its time: %q", line)
		}
	}
}

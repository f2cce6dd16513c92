package wardenproc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNewRunDirNeverShared(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	now := time.Date(2026, 12, 6, 5, 20, 0, 0, time.UTC)
	a, err := NewRunDir(now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRunDir(now) // the same second and the same process id
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two runs in the same second share %s", a)
	}
	want := "20261206-052000-" + strconv.Itoa(os.Getpid())
	if filepath.Base(a) != want || !strings.HasPrefix(filepath.Base(b), want+"-") {
		t.Errorf("folders %s and %s, want %s and %s-N", a, b, want, want)
	}
	for _, d := range []string{a, b} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("%s was not made: %v", d, err)
		}
	}
}

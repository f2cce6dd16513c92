//go:build linux

package fdlimit

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const childEnv = "FDLIMIT_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if mode == "lower" { // below what Go's runtime set, as a prlimit from outside would
			var r syscall.Rlimit
			_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r)
			r.Cur = 256
			_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
		}
		l, err := Raise()
		fmt.Printf("%d %d %d %v\n", l.Soft, l.Hard, l.From, err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A process started with a soft limit of 256 runs with the hard limit (or
// one less, as Go's runtime raises it) after Raise.
func TestRaiseLeavesTheSoftLimitAtTheHardOne(t *testing.T) {
	for _, mode := range []string{"exec", "lower"} {
		t.Run(mode, func(t *testing.T) { checkRaise(t, mode) })
	}
}

// checkRaise runs the test binary as a child with a soft limit of 256 at
// exec, and (mode lower) 256 again after Go's runtime raised it.
func checkRaise(t *testing.T, mode string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `ulimit -Sn 256 && ulimit -Hn && exec "$0"`, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("child printed %q", out)
	}
	var soft, hard, from uint64
	var rerr string
	if _, err := fmt.Sscan(lines[1], &soft, &hard, &from, &rerr); err != nil {
		t.Fatalf("child printed %q: %v", lines[1], err)
	}
	if rerr != "<nil>" || soft+1 < hard {
		t.Fatalf("after Raise: soft %d, hard %d (from %d), error %s; want soft = hard (or one less, as Go leaves it)", soft, hard, from, rerr)
	}
	if want := strings.TrimSpace(lines[0]); want != "unlimited" && want != strconv.FormatUint(hard, 10) {
		t.Errorf("hard limit %d, the shell's is %s", hard, want)
	}
	if mode == "lower" && (from != 256 || soft != hard) {
		t.Errorf("lowered to 256 after start: Raise found %d and left %d, want 256 raised to the hard limit %d", from, soft, hard)
	}
	t.Logf("%s: soft limit 256 -> %d (found %d at Raise; hard %d)", mode, soft, from, hard)
}

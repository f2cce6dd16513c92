package wardenproc

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// URL is the base URL of a warden listening on host:port as a user can
// paste it: a wildcard host (0.0.0.0, ::, none) reads as 127.0.0.1.
func URL(host, port string) string {
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// StateDir is where the warden keeps its files: $XDG_STATE_HOME/warden
// (~/.local/state/warden when unset).
func StateDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "warden")
}

// DefaultLogDir is a `warden serve` run's log folder when --log-dir is not
// given: <StateDir>/runs/<time>-<pid>. The process id keeps two wardens
// started in the same second apart; NewRunDir creates such a folder so that
// no other run can have it.
func DefaultLogDir(now time.Time) string {
	return filepath.Join(StateDir(), "runs", now.Format("20060102-150405")+"-"+strconv.Itoa(os.Getpid()))
}

// NewRunDir creates a run's log folder that no other run shares, and
// returns its path: DefaultLogDir(now), or that name with -2, -3, ...
// appended when a folder of that name exists already (a process id reused
// within the same second). The folder is made with one mkdir, which fails
// when it exists, so two processes can never both be given it.
func NewRunDir(now time.Time) (string, error) {
	base := DefaultLogDir(now)
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return "", err
	}
	for i := 1; i <= 1000; i++ {
		dir := base
		if i > 1 {
			dir += "-" + strconv.Itoa(i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("no free run folder next to %s", base)
}

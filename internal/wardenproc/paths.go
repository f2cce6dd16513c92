package wardenproc

import (
	"net"
	"os"
	"path/filepath"
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
// given: <StateDir>/runs/<time>.
func DefaultLogDir(now time.Time) string {
	return filepath.Join(StateDir(), "runs", now.Format("20060102-150405"))
}

package command

import (
	"fmt"

	"github.com/lmwarden/warden/internal/exit"
)

// unsupported is the refusal of what (a command that starts engines) on an
// OS without process groups: the reason, where it does run, and what
// works here instead.
func unsupported(what, goos string) error {
	return exit.New(2, fmt.Sprintf("%s: not supported on %s: engines are started and stopped as process groups "+
		"(Linux or macOS; on Windows, WSL2). Here, warden route, status, bench, wait and run (without --serve) "+
		"work against a warden elsewhere.", what, goos))
}

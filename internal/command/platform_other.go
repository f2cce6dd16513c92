//go:build !unix

package command

import (
	"fmt"
	"runtime"

	"github.com/lmwarden/warden/internal/exit"
)

// processGroups refuses what starts engines outside Unix: the warden stops
// an engine and every process it started through its process group, which
// this OS does not have. What only talks HTTP (route, status, bench, wait,
// run against a warden elsewhere) works here.
func processGroups(what string) error {
	return exit.New(2, fmt.Sprintf("%s: not supported on %s: engines are started and stopped as process groups "+
		"(Linux or macOS; on Windows, WSL2). Here, warden route, status, bench, wait and run (without --serve) "+
		"work against a warden elsewhere.", what, runtime.GOOS))
}

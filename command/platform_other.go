//go:build !unix

package command

import "runtime"

// processGroups refuses what starts engines outside Unix: the warden stops
// an engine and every process it started through its process group, which
// this OS does not have. What only talks HTTP works here.
func processGroups(what string) error { return unsupported(what, runtime.GOOS) }

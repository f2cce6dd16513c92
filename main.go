// Command warden runs local LLM engines (vLLM) for coding agents: one engine
// per data-parallel rank, and in front of them a sticky, load-aware proxy that
// keeps each conversation on the replica whose prefix cache holds it.
//
// This package only wires: the command tree, every flag and its WARDEN_*
// variable are command's, and each command's work is its package's
// (serve: `warden serve`, `route` and `devices`; run; sweep; bench; gpu;
// router/panel: `warden status`; sim; internal/wardenproc: `warden wait`).
package main

import (
	"fmt"
	"os"

	"github.com/lmwarden/warden/command"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := command.Run(os.Args, version); err != nil {
		fmt.Fprintln(os.Stderr, "warden:", err)
		os.Exit(1)
	}
}

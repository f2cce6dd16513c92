// Command replay runs the replay harness's explorations (package
// sim/replay): research tables on the simulator's scheduler in virtual
// time, printed and not asserted. It is not part of the warden.
//
//	go run ./sim/replay/cmd/replay                 # lists the explorations and their settings
//	go run ./sim/replay/cmd/replay explore scan    # runs them in turn
//	CAL_SEEDS=3 CAL_STAGES=16,24 go run ./sim/replay/cmd/replay router-verdict
//
// Settings come from the environment (each exploration's description
// names the variables it reads), as the tables in docs/router.md and
// docs/calibration.md were made with them.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/lmwarden/warden/sim/replay"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(2)
	}
}

func run(args []string, w io.Writer, getenv func(string) string) error {
	all := replay.Explorations()
	if len(args) == 0 || slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]) {
		fmt.Fprintln(w, "usage: go run ./sim/replay/cmd/replay NAME...\n\nExplorations (settings from the environment, defaults in parentheses):")
		for _, e := range all {
			fmt.Fprintf(w, "\n  %s\n%s", e.Name, wrap(e.Doc, "      ", 100))
		}
		return nil
	}
	var todo []replay.Exploration
	for _, name := range args {
		i := slices.IndexFunc(all, func(e replay.Exploration) bool { return e.Name == name })
		if i < 0 {
			names := make([]string, len(all))
			for j, e := range all {
				names[j] = e.Name
			}
			return fmt.Errorf("no exploration %q (choose from %s; run without arguments for what each prints)", name, strings.Join(names, ", "))
		}
		todo = append(todo, all[i])
	}
	for _, e := range todo {
		if len(todo) > 1 {
			fmt.Fprintf(w, "== %s\n", e.Name)
		}
		if err := e.Run(w, getenv); err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
	}
	return nil
}

// wrap breaks text into lines of at most width columns, each indented.
func wrap(text, indent string, width int) string {
	var b, line strings.Builder
	for _, word := range strings.Fields(text) {
		if line.Len() > 0 && len(indent)+line.Len()+1+len(word) > width {
			fmt.Fprintf(&b, "%s%s\n", indent, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	if line.Len() > 0 {
		fmt.Fprintf(&b, "%s%s\n", indent, line.String())
	}
	return b.String()
}

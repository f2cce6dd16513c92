// Package argv reads flags out of argument lists the way the programs that
// parse them do (vLLM's argparse, Go's flag package behind the warden's own
// commands): a flag is "NAME V" or "NAME=V", the last one wins, and a "--"
// ends the flags. It is the one scanner launch, gpu, the commands and their
// orchestrators (run, sweep) use; a flag's spellings ("--max-model-len",
// "--max_model_len"; "-port", "--port") are passed as names.
package argv

import (
	"slices"
	"strings"
)

// Split returns the arguments before the first "--" and those after it;
// found is false (and after nil) when there is no "--".
func Split(args []string) (before, after []string, found bool) {
	i := slices.Index(args, "--")
	if i < 0 {
		return args, nil, false
	}
	return args[:i], args[i+1:], true
}

// Has reports whether args set the flag spelled as any of names, as
// "NAME V" or "NAME=V".
func Has(args []string, names ...string) bool {
	_, ok := Which(args, names...)
	return ok
}

// Which returns the first of names that args set, in the order of args.
func Which(args []string, names ...string) (string, bool) {
	for _, a := range args {
		for _, n := range names {
			if a == n || strings.HasPrefix(a, n+"=") {
				return n, true
			}
		}
	}
	return "", false
}

// Value returns the value args give the flag spelled as any of names
// ("NAME V" or "NAME=V"; the last one wins, as with argparse); a NAME last
// in args has the value "". ok is false when the flag is not there.
func Value(args []string, names ...string) (value string, ok bool) {
	for i, a := range args {
		for _, n := range names {
			if a == n {
				value, ok = "", true
				if i+1 < len(args) {
					value = args[i+1]
				}
			} else if v, found := strings.CutPrefix(a, n+"="); found {
				value, ok = v, true
			}
		}
	}
	return value, ok
}

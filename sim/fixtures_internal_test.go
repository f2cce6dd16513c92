package sim

import "testing"

// Fixtures of the package's own tests: the argv parsed without an
// environment.

var noEnv = func(string) string { return "" }

func mustParse(t *testing.T, args ...string) Config {
	t.Helper()
	c, err := ParseArgs(args, noEnv)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", args, err)
	}
	return c
}

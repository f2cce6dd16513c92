package main

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/sim/replay"
)

// TestUsageListsEveryExploration: without arguments the command lists each
// exploration with the settings it reads, in lines of at most 100 columns;
// an unknown name is an error that lists the names.
func TestUsageListsEveryExploration(t *testing.T) {
	none := func(string) string { return "" }
	var out strings.Builder
	if err := run(nil, &out, none); err != nil {
		t.Fatal(err)
	}
	for _, e := range replay.Explorations() {
		if !strings.Contains(out.String(), "\n  "+e.Name+"\n") {
			t.Errorf("usage does not list %s:\n%s", e.Name, out.String())
		}
	}
	if !strings.Contains(out.String(), "CAL_SEEDS (2)") {
		t.Errorf("usage does not name the settings:\n%s", out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if len([]rune(line)) > 100 {
			t.Errorf("line over 100 columns: %q", line)
		}
	}
	err := run([]string{"scan", "scna"}, &out, none)
	if err == nil || !strings.Contains(err.Error(), `no exploration "scna" (choose from explore, sweep,`) {
		t.Errorf("unknown name: error %v", err)
	}
}

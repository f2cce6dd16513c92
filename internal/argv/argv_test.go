package argv

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValue(t *testing.T) {
	args := []string{"--a", "1", "--b=2", "--a=3", "--c"}
	for _, c := range []struct {
		flag, want string
		ok         bool
	}{{"--a", "3", true}, {"--b", "2", true}, {"--c", "", true}, {"--d", "", false}} {
		if v, ok := Value(args, c.flag); v != c.want || ok != c.ok {
			t.Errorf("Value(%s) = %q %v, want %q %v", c.flag, v, ok, c.want, c.ok)
		}
	}
	// Spellings of one flag: the last one given wins, whichever it is.
	if v, ok := Value([]string{"--x-y", "1", "--x_y=2"}, "--x-y", "--x_y"); v != "2" || !ok {
		t.Errorf("two spellings: %q %v, want 2", v, ok)
	}
}

func TestHasAndWhich(t *testing.T) {
	args := []string{"--model", "m", "--tp=2", "--dp", "1"}
	if !Has(args, "--tp") || !Has(args, "--dp") || Has(args, "--t") || Has(args, "--port") {
		t.Errorf("Has on %q", args)
	}
	if n, ok := Which(args, "--dp", "--tp"); n != "--tp" || !ok {
		t.Errorf("Which = %q %v, want --tp (first in args)", n, ok)
	}
}

func TestSplit(t *testing.T) {
	before, after, found := Split([]string{"--model", "m", "--", "--port", "1", "--", "x"})
	if !found || !cmp.Equal(before, []string{"--model", "m"}) || !cmp.Equal(after, []string{"--port", "1", "--", "x"}) {
		t.Errorf("Split = %q %q %v", before, after, found)
	}
	if before, after, found := Split([]string{"--model", "m"}); found || after != nil || len(before) != 2 {
		t.Errorf("no --: %q %q %v", before, after, found)
	}
}

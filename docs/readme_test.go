package docs

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeShort: the README stays at most 250 lines; detail goes to
// docs/ (issue 45).
func TestReadmeShort(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 250 {
		t.Errorf("README.md has %d lines, at most 250: move detail to docs/", n)
	}
}

package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMix(t *testing.T) {
	got, err := parseMix("2000x10, 7300x5,15000x3")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Shape{{2000, 10}, {7300, 5}, {15000, 3}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"7300", "x5", "7300x", "0x5", "7300x-1", "ax5"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	c := DefaultConfig()
	if s, n := c.shape(4); s.FirstTokens != 7300 || n != 5 {
		t.Errorf("no mix: %d x %d", s.FirstTokens, n)
	}
	c.Mix = got
	if s, n := c.shape(4); s.FirstTokens != 7300 || n != 5 || s.TurnTokens != 400 {
		t.Errorf("session 4 of the mix: %+v x %d", s, n)
	}
}

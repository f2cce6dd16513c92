package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// Shape is one kind of session in a mixed load (--mix): its first message
// and its number of follow-up turns.
type Shape struct {
	FirstTokens int
	Turns       int
}

// parseMix parses "2000x10,7300x5,15000x3" (first-message tokens x
// follow-up turns); "" means no mix.
func parseMix(s string) ([]Shape, error) {
	var out []Shape
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, b, ok := strings.Cut(f, "x")
		first, err1 := strconv.Atoi(strings.TrimSpace(a))
		turns, err2 := strconv.Atoi(strings.TrimSpace(b))
		if !ok || err1 != nil || err2 != nil || first < 1 || turns < 0 {
			return nil, fmt.Errorf("--mix: %q is not FIRSTxTURNS (e.g. 7300x5)", f)
		}
		out = append(out, Shape{FirstTokens: first, Turns: turns})
	}
	return out, nil
}

// mixString is the --mix spelling of m ("" = no mix).
func mixString(m []Shape) string {
	var f []string
	for _, s := range m {
		f = append(f, fmt.Sprintf("%dx%d", s.FirstTokens, s.Turns))
	}
	return strings.Join(f, ",")
}

// shape returns session k's first-message size and follow-up turns: the
// mix's shapes in turn, or the configured sizes without a mix.
func (c *Config) shape(k int) (Sizes, int) {
	if len(c.Mix) == 0 {
		return c.Sizes, c.Turns
	}
	m := c.Mix[k%len(c.Mix)]
	s := c.Sizes
	s.FirstTokens = m.FirstTokens
	return s, m.Turns
}

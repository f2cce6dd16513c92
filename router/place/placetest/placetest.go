// Package placetest holds what tests of placement share: a random source
// that breaks every tie the same way.
package placetest

// FixedRand always picks tie number n (modulo the number of ties); it is a
// place.Rand.
type FixedRand int

// IntN implements place.Rand.
func (f FixedRand) IntN(n int) int { return int(f) % n }

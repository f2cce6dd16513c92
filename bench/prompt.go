package bench

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
)

// textGen produces deterministic English-like pseudo-text: lower-case
// pseudo-words built from syllables, grouped into sentences and paragraphs.
// The same seed always yields the same text. It is not safe for concurrent
// use; each session owns its own.
type textGen struct {
	rng *rand.Rand
}

// Letters of the pseudo-words, alternating consonant and vowel.
const (
	consonants = "bcdfghjklmnprstvwyz"
	vowels     = "aeiou"
)

// wordLengths is the length distribution of pseudo-words (one entry per
// 1/20 of probability), English-like: mean 4.2 letters. The simulator's
// tokenizer makes about 4 characters per token of this text; bench measures
// the target's ratio at start (--chars-per-token 0) rather than trusting it.
var wordLengths = [20]int{1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 6, 6, 7, 7, 8}

// newTextGen returns a generator seeded from the given parts (hashed), so that
// e.g. (seed, "first", stage, session) names one stream of text.
func newTextGen(parts ...any) *textGen {
	h := fnv.New64a()
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			h.Write([]byte(v))
		case int:
			h.Write([]byte(strconv.Itoa(v)))
		case int64:
			h.Write([]byte(strconv.FormatInt(v, 10)))
		case uint64:
			h.Write([]byte(strconv.FormatUint(v, 10)))
		}
		h.Write([]byte{0})
	}
	s := h.Sum64()
	return &textGen{rng: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))}
}

// word appends one pseudo-word.
func (g *textGen) word(b *strings.Builder) {
	n := wordLengths[g.rng.IntN(len(wordLengths))]
	vowel := g.rng.IntN(3) == 0
	for i := 0; i < n; i++ {
		if vowel {
			b.WriteByte(vowels[g.rng.IntN(len(vowels))])
		} else {
			b.WriteByte(consonants[g.rng.IntN(len(consonants))])
		}
		vowel = !vowel
	}
}

// text returns pseudo-text of exactly chars characters (chars <= 0 gives "").
func (g *textGen) text(chars int) string {
	if chars <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(chars + 32)
	inSentence := 0
	for b.Len() < chars {
		g.word(&b)
		inSentence++
		switch {
		case inSentence >= 12 && g.rng.IntN(10) == 0:
			inSentence = 0
			if g.rng.IntN(5) == 0 {
				b.WriteString(".\n\n")
			} else {
				b.WriteString(". ")
			}
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()[:chars]
}

// Sizes says how large the synthetic conversation parts are, in tokens, and
// how many characters of pseudo-text make one token for the target's
// tokenizer.
type Sizes struct {
	SystemTokens  int     // shared system prompt
	FirstTokens   int     // unique first user message
	TurnTokens    int     // new user tokens per follow-up turn
	CharsPerToken float64 // characters of generated text per token
}

func (s Sizes) chars(tokens int) int {
	return int(float64(tokens)*s.CharsPerToken + 0.5)
}

// calibrationChars are the two text lengths whose token counts give the
// target's characters per token (the difference cancels the template). The
// long one stays within a 4k context even for a tokenizer of one character
// a token (the real-engine tier's tiny model refused the first choice,
// 20,000 characters, as longer than its context).
const calibrationShort, calibrationLong = 500, 3500

// measureCharsPerToken returns the characters per token of generated text
// for the given tokenizer.
func measureCharsPerToken(count func(text string) (int, error)) (float64, error) {
	long := newTextGen("calibration").text(calibrationLong)
	a, err := count(long[:calibrationShort])
	if err != nil {
		return 0, err
	}
	b, err := count(long)
	if err != nil {
		return 0, err
	}
	if b <= a {
		return 0, fmt.Errorf("tokenizer counted %d tokens for %d characters and %d for %d", a, calibrationShort, b, calibrationLong)
	}
	return float64(calibrationLong-calibrationShort) / float64(b-a), nil
}

// systemPrompt is the prompt every session shares (depends on the seed only).
func systemPrompt(seed int64, s Sizes) string {
	return newTextGen(seed, "system").text(s.chars(s.SystemTokens))
}

// sessionText yields the user messages of one session: the unique first
// message, then follow-ups. id names the session's content stream (for
// example stage concurrency and the session's sequence number in the stage),
// so that two variants run with one seed send the same prompts.
type sessionText struct {
	gen   *textGen
	sizes Sizes
	turn  int
}

func newSessionText(seed int64, sizes Sizes, id ...any) *sessionText {
	return &sessionText{gen: newTextGen(append([]any{seed, "session"}, id...)...), sizes: sizes}
}

// next returns the next user message: the first message on the first call,
// a follow-up of TurnTokens afterwards.
func (t *sessionText) next() string {
	t.turn++
	if t.turn == 1 {
		return t.gen.text(t.sizes.chars(t.sizes.FirstTokens))
	}
	return t.gen.text(t.sizes.chars(t.sizes.TurnTokens))
}

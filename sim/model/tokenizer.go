package model

import (
	"unicode"
	"unicode/utf8"
)

// The tokenizer is a deterministic stand-in for a BPE tokenizer: text is
// split at special tokens, then into GPT-style pre-tokens (a word with at most
// one leading space, a punctuation run, a newline run, a space run), then each
// pre-token into pieces of at most 6 bytes (so most English words with their
// leading space are one token). A piece's token id is a hash of its bytes.
// Properties the engine relies on:
//   - the same text always gives the same tokens;
//   - text split at a special token tokenizes as the concatenation of its parts,
//     so a replayed conversation's tokens start with the earlier prompt's tokens;
//   - generated text (see generator) re-tokenizes to the generated tokens.
//
// English comes out at about 4 characters per token.

const (
	imStart = "<|im_start|>"
	imEnd   = "<|im_end|>"
	// Token ids of the special tokens (Qwen's, for flavour).
	tokIMStart uint32 = 151644
	tokIMEnd   uint32 = 151645
	maxPiece          = 6
)

// Tokenize returns the token ids of text.
func Tokenize(text string) []uint32 {
	toks := make([]uint32, 0, len(text)/3+4)
	return appendTokens(toks, text)
}

// CountTokens returns len(Tokenize(text)) without keeping the ids.
func CountTokens(text string) int { return len(Tokenize(text)) }

func appendTokens(toks []uint32, text string) []uint32 {
	for len(text) > 0 {
		i, special, id := nextSpecial(text)
		toks = appendPlain(toks, text[:i])
		if !special {
			break
		}
		toks = append(toks, id)
		text = text[i+len(specialText(id)):]
	}
	return toks
}

func specialText(id uint32) string {
	if id == tokIMStart {
		return imStart
	}
	return imEnd
}

// nextSpecial finds the first special token in s: its index, whether there is
// one, and its id. Without one the index is len(s).
func nextSpecial(s string) (int, bool, uint32) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '<' || s[i+1] != '|' {
			continue
		}
		if hasPrefixAt(s, i, imStart) {
			return i, true, tokIMStart
		}
		if hasPrefixAt(s, i, imEnd) {
			return i, true, tokIMEnd
		}
	}
	return len(s), false, 0
}

func hasPrefixAt(s string, i int, p string) bool {
	return len(s)-i >= len(p) && s[i:i+len(p)] == p
}

type runeClass int

const (
	classWord runeClass = iota
	classPunct
	classSpace
	classNewline
)

// asciiClass caches classify for ASCII.
var asciiClass = func() (t [128]runeClass) {
	for r := range t {
		t[r] = classifySlow(rune(r))
	}
	return t
}()

func classify(r rune) runeClass {
	if r < 128 {
		return asciiClass[r]
	}
	return classifySlow(r)
}

func classifySlow(r rune) runeClass {
	switch {
	case r == '\n' || r == '\r':
		return classNewline
	case unicode.IsSpace(r):
		return classSpace
	case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_':
		return classWord
	default:
		return classPunct
	}
}

// appendPlain tokenizes text that holds no special token.
func appendPlain(toks []uint32, s string) []uint32 {
	for len(s) > 0 {
		n := preTokenLen(s)
		toks = appendPieces(toks, s[:n])
		s = s[n:]
	}
	return toks
}

// preTokenLen returns the byte length of the pre-token at the start of s.
func preTokenLen(s string) int {
	r, size := utf8.DecodeRuneInString(s)
	c := classify(r)
	start := 0
	if r == ' ' && size < len(s) {
		r2, size2 := utf8.DecodeRuneInString(s[size:])
		if c2 := classify(r2); c2 == classWord || c2 == classPunct {
			c, start = c2, size+size2
		}
	}
	if start == 0 {
		start = size
	}
	i := start
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if classify(r) != c {
			break
		}
		if c == classSpace && r == ' ' && i+size < len(s) {
			// leave the last space of a run to the word after it
			r2, _ := utf8.DecodeRuneInString(s[i+size:])
			if c2 := classify(r2); c2 == classWord || c2 == classPunct {
				break
			}
		}
		i += size
	}
	return i
}

// appendPieces splits a pre-token into pieces of at most maxPiece bytes on
// rune boundaries.
func appendPieces(toks []uint32, w string) []uint32 {
	for len(w) > 0 {
		n := 0 // pieceLen(w), by hand: the hot path, and too big to inline
		for n < len(w) {
			_, size := utf8.DecodeRuneInString(w[n:])
			if n > 0 && n+size > maxPiece {
				break
			}
			n += size
		}
		toks = append(toks, pieceID(w[:n]))
		w = w[n:]
	}
	return toks
}

// pieceLen is the byte length of the first piece of pre-token w, as
// appendPieces splits it.
func pieceLen(w string) int {
	n := 0
	for n < len(w) {
		_, size := utf8.DecodeRuneInString(w[n:])
		if n > 0 && n+size > maxPiece {
			break
		}
		n += size
	}
	return n
}

// TokenPieces is Tokenize with the text of each token: the pieces
// concatenate to text, so text generated piece by piece re-tokenizes to
// the same ids.
func TokenPieces(text string) ([]uint32, []string) {
	var ids []uint32
	var pieces []string
	for len(text) > 0 {
		i, special, id := nextSpecial(text)
		for plain := text[:i]; len(plain) > 0; {
			w := plain[:preTokenLen(plain)]
			plain = plain[len(w):]
			for len(w) > 0 {
				n := pieceLen(w)
				ids, pieces = append(ids, pieceID(w[:n])), append(pieces, w[:n])
				w = w[n:]
			}
		}
		if !special {
			break
		}
		st := specialText(id)
		ids, pieces = append(ids, id), append(pieces, st)
		text = text[i+len(st):]
	}
	return ids, pieces
}

// pieceID hashes a piece (FNV-1a) into the id space below the special ids.
func pieceID(p string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(p); i++ {
		h ^= uint32(p[i])
		h *= 16777619
	}
	return h % 151643
}

// generator produces deterministic output text: pseudo-words of three
// lowercase letters, the first without and the rest with a leading space, so
// each is exactly one piece and the text re-tokenizes to the same ids.
type generator struct {
	bare, spaced       []string
	bareIDs, spacedIDs []uint32
}

func newGenerator() *generator {
	const cons, vows = "bcdfghjklmnprstvwz", "aeiou"
	g := &generator{}
	for _, a := range cons {
		for _, v := range vows {
			for _, b := range cons {
				w := string([]rune{a, v, b})
				g.bare = append(g.bare, w)
				g.spaced = append(g.spaced, " "+w)
				g.bareIDs = append(g.bareIDs, pieceID(w))
				g.spacedIDs = append(g.spacedIDs, pieceID(" "+w))
			}
		}
	}
	return g
}

// token returns the id and text of output token i of a request whose prompt
// hashes to seed.
func (g *generator) token(seed uint64, i int) (uint32, string) {
	j := int(mix64(seed^uint64(i)*0x9e3779b97f4a7c15) % uint64(len(g.bare)))
	if i == 0 {
		return g.bareIDs[j], g.bare[j]
	}
	return g.spacedIDs[j], g.spaced[j]
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

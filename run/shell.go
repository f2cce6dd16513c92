package run

import (
	"errors"
	"strings"
)

// shellCommand is the run as one shell command: env -u ... KEY=VALUE ...
// argv. A key the user gave is shown as <api-key>.
func shellCommand(p launchPlan, argv []string, secret string) string {
	hide := func(s string) string {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "<api-key>")
		}
		return shellQuote(s)
	}
	parts := []string{"env"}
	for _, k := range p.Unset {
		parts = append(parts, "-u "+k)
	}
	for _, s := range p.Set {
		parts = append(parts, s.Key+"="+hide(s.Value))
	}
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = hide(a)
	}
	parts = append(parts, strings.Join(words, " "))
	return strings.Join(parts, " \\\n  ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@,+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// splitWords splits s as a POSIX shell would split words: blanks separate,
// '...' is literal, "..." allows \" \\ \$ \`, a backslash outside quotes
// escapes the next character (a backslash-newline is nothing).
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("a trailing backslash")
			}
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
				inWord = true
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("an unclosed '")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i, inWord = i+1+j, true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`an unclosed "`)
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

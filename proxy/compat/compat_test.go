package compat

import (
	"testing"

	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/router/identity"
)

// TestIncludeUsageIsSjsons: IncludeUsage writes what sjson writes, for
// well-formed bodies and broken ones, with and without stream_options.
func TestIncludeUsageIsSjsons(t *testing.T) {
	for _, in := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"a":1} `, "{\"a\":1}\n", ` {"a":1}`, `{ "a" : 1 }`, `{}`, `{ }`, "{\n}", `{"a":"x}"}`,
		`{"a":1}xx}`, `{"a":1} x`, `{"a":{"b":}`, `{"a":1,}`, `{"a":1`, `[1,2]`, ``, `x`, `}`, `{`,
		`{"stream_options":{}}`, `{"a":1,"stream_options":{"x":1}}`, `{"stream_options":null,"a":1}`,
		`{"stream_options":{"include_usage":false}}`, `{"stream_options":1}`, ` {"stream_options":{}}`,
		"\n\t{\"a\":[{\"stream_options\":1}],\"b\":\"}\"}\n", `{"s\u0074ream_options":{}}`, `{"a":1,"stream_options":1,"stream_options":2}`,
	} {
		want, werr := sjson.SetBytes([]byte(in), "stream_options.include_usage", true)
		buf := make([]byte, len(in), len(in)+64) // room: the splice goes in place
		copy(buf, in)
		got, ok := IncludeUsage(buf, identity.Scan([]byte(in)).StreamOptions)
		if ok != (werr == nil) || (ok && string(got) != string(want)) {
			t.Errorf("%q: got %q %v, sjson %q %v", in, got, ok, want, werr)
		}
	}
}

func FuzzIncludeUsage(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{}`, ` { "x" : [1,{"y":"}"}] } `, `{"stream_options":{"a":1}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		want, werr := sjson.SetBytes([]byte(in), "stream_options.include_usage", true)
		got, ok := IncludeUsage([]byte(in), identity.Scan([]byte(in)).StreamOptions)
		if ok != (werr == nil) || (ok && string(got) != string(want)) {
			t.Errorf("%q: got %q %v, sjson %q %v", in, got, ok, want, werr)
		}
	})
}

package schema

import "testing"

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000/": "http://127.0.0.1:8000", "127.0.0.1:9000": "http://127.0.0.1:9000",
		" https://warden.lan/ ": "https://warden.lan", "http://h:1/base/": "http://h:1/base",
		"http://127.0.0.1:8000/v1": "http://127.0.0.1:8000", "127.0.0.1:8000/v1/": "http://127.0.0.1:8000",
		"http://h:1/base/v1": "http://h:1/base", "http://h:1/v1beta": "http://h:1/v1beta",
	} {
		if got, err := NormalizeURL(in); err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x", "http://", "::"} {
		if _, err := NormalizeURL(bad); err == nil {
			t.Errorf("NormalizeURL(%q) accepted", bad)
		}
	}
}

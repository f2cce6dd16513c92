package panel

import (
	"encoding/json"
	"github.com/lmwarden/warden/router/schema"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func get(t *testing.T, h http.Handler, method, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestPageHandlerServesPageWithInitialStatus(t *testing.T) {
	s := sampleStatus(3)
	s.Model = `evil</script><script>alert(1)</script>`
	h := PageHandler(func() schema.Status { return s })
	for _, path := range []string{"/", "/warden", "/warden/"} {
		res, body := get(t, h, "GET", path)
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if strings.Contains(body, "<script>alert(1)") {
			t.Fatalf("model name not escaped:\n%s", body)
		}
		// The embedded status decodes back to what src returned.
		const open = `<script id="initial-status" type="application/json">`
		i := strings.Index(body, open)
		j := strings.Index(body[i:], "</script>")
		if i < 0 || j < 0 {
			t.Fatalf("no initial status in page:\n%s", body)
		}
		var got schema.Status
		if err := json.Unmarshal([]byte(body[i+len(open):i+j]), &got); err != nil {
			t.Fatalf("initial status: %v", err)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("initial status (-want +got):\n%s", diff)
		}
		if !strings.Contains(body, "<noscript><pre>") || !strings.Contains(body, "8103  starting") {
			t.Errorf("no text table for browsers without JS")
		}
	}
}

func TestPageHandlerAssetsAndErrors(t *testing.T) {
	h := PageHandler(func() schema.Status { return schema.Status{} })
	for path, ctype := range map[string]string{
		"/warden/assets/panel.js": "text/javascript", "/warden/assets/panel.css": "text/css",
	} {
		res, body := get(t, h, "GET", path)
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), ctype) || len(body) < 500 {
			t.Errorf("GET %s: %d %q, %d bytes", path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
	}
	for path, code := range map[string]int{"/nope": 404, "/warden/assets/none.js": 404, "/v1/models": 404} {
		if res, _ := get(t, h, "GET", path); res.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, res.StatusCode, code)
		}
	}
	if res, _ := get(t, h, "POST", "/"); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", res.StatusCode)
	}
}

// TestAssetsAreLocal fails if any asset loads something from elsewhere.
func TestAssetsAreLocal(t *testing.T) {
	err := fs.WalkDir(assetFS, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFS.ReadFile(path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "") // a namespace, never fetched
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "url("} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestJSONHandler(t *testing.T) {
	s := sampleStatus(2)
	res, body := get(t, JSONHandler(func() schema.Status { return s }), "GET", StatusPath)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var got schema.Status
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

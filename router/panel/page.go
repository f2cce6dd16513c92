package panel

import (
	"bytes"
	"embed"
	"encoding/json"
	"github.com/lmwarden/warden/router/schema"
	"html/template"
	"io/fs"
	"net/http"
)

// Paths the page uses. The admin endpoints mount PageHandler on PagePath and
// on AssetsPath, and serve the status JSON (JSONHandler) on StatusPath.
const (
	PagePath   = "/"
	AssetsPath = "/warden/assets/"
	StatusPath = schema.Path
)

//go:embed assets
var assetFS embed.FS

// pageTemplate is assets/index.html; a parse error is a build defect, which
// the package's tests catch.
var pageTemplate = template.Must(template.ParseFS(assetFS, "assets/index.html"))

// csp keeps the page to its own origin: no CDN, no inline script.
const csp = "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// PageHandler serves the HTML status page at "/" (also "/warden" and
// "/warden/") and its embedded assets under AssetsPath. The page carries
// the current Status (from src) so it renders at once, a plain-text table
// for browsers without JavaScript, and then polls StatusPath every 2 s.
// Other paths get 404. src is called once per page load.
func PageHandler(src func() schema.Status) http.Handler {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	files := http.StripPrefix(AssetsPath, http.FileServerFS(sub))
	page := func(w http.ResponseWriter, r *http.Request) { servePage(w, src()) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /warden", page)
	mux.HandleFunc("GET /warden/{$}", page)
	mux.Handle("GET "+AssetsPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	}))
	return mux
}

// pageData fills assets/index.html.
type pageData struct {
	Model string
	Text  string      // formatStatusTable, for <noscript>
	JSON  template.JS // the Status; json.Marshal escapes <, > and &
}

func servePage(w http.ResponseWriter, s schema.Status) {
	js, err := json.Marshal(s)
	if err != nil {
		http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var text, out bytes.Buffer
	formatStatusTable(&text, s)
	if err := pageTemplate.Execute(&out, pageData{Model: s.Model, Text: text.String(), JSON: template.JS(js)}); err != nil {
		http.Error(w, "page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(out.Bytes())
}

// JSONHandler serves src() as JSON (the status endpoint, StatusPath).
func JSONHandler(src func() schema.Status) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		js, err := json.MarshalIndent(src(), "", "  ") // read by people with curl too
		if err != nil {
			http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(js, '\n'))
	})
}

package proxy

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/lmwarden/warden/internal/apierr"
)

// withAPIHint answers a request for an API path without its /v1 prefix
// (POST /chat/completions, /messages, GET /models: a client whose base URL
// lacks /v1) with a 404 that names the right path, in the API's shape;
// every other request goes to next.
func withAPIHint(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, "/v1/") || p == "/" || !knownPath("/v1"+p) {
			next.ServeHTTP(w, r)
			return
		}
		apierr.WriteFor(w, "/v1"+p, http.StatusNotFound, fmt.Sprintf(
			"no endpoint %s: the APIs are under /v1, use /v1%s (an OpenAI client's base URL ends in /v1: http://%s/v1)",
			p, p, r.Host))
	})
}

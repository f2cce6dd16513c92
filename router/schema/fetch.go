package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Path is where a warden serves its Status as JSON.
const Path = "/warden/status"

// DefaultURL is where `warden status` looks for a warden.
const DefaultURL = "http://127.0.0.1:8000"

// NormalizeURL accepts "host:port" or a full http(s) URL and returns it
// without a trailing slash; a base URL as agents take it (ending in /v1,
// the API's root) stands for the warden it names.
func NormalizeURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", errors.New("--url is empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--url %q: want a URL such as %s", raw, DefaultURL)
	}
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1")
	u.RawPath = ""
	return strings.TrimRight(u.String(), "/"), nil
}

// Fetch reads the Status of the warden at base (e.g.
// http://127.0.0.1:8000) from Path. It also returns the raw body.
// Errors say what was wrong: nothing listening, not a warden, bad JSON.
func Fetch(ctx context.Context, client *http.Client, base string) (Status, []byte, error) {
	var s Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+Path, nil)
	if err != nil {
		return s, nil, fmt.Errorf("status request: %w", err)
	}
	res, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the message already
		}
		return s, nil, fmt.Errorf("no warden at %s: %w — is `warden serve` running?", base, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 32<<20))
	if err != nil {
		return s, nil, fmt.Errorf("reading %s%s: %w", base, Path, err)
	}
	if res.StatusCode != http.StatusOK {
		return s, body, fmt.Errorf("%s%s answered %s: is this a warden (`warden serve`)?", base, Path, res.Status)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, body, fmt.Errorf("%s%s did not answer a warden status: %w", base, Path, err)
	}
	return s, body, nil
}

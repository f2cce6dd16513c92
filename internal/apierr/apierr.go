// Package apierr writes the warden's own error answers in the shape of the
// API the client called: Anthropic's for /v1/messages (Claude Code reads
// {"type":"error","error":{"type":...,"message":...}}), OpenAI's otherwise
// ({"error":{"message":...,"type":...,"code":...}}, which the warden's admin
// endpoints use too). Every error the warden itself answers goes through
// here, so its shape is decided in one place.
package apierr

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Write answers code with msg in the OpenAI-shaped body, type
// "warden_error": the admin endpoints and the OpenAI paths.
func Write(w http.ResponseWriter, code int, msg string) { WriteFor(w, "", code, msg) }

// WriteFor answers code with msg in the shape of the API at path.
func WriteFor(w http.ResponseWriter, path string, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(Body(path, code, msg))
}

// Body is the error body of code with msg in the shape of the API at path
// (a data plane that does not write the answer itself hands it on).
func Body(path string, code int, msg string) []byte {
	m, _ := json.Marshal(msg)
	if Anthropic(path) {
		return fmt.Appendf(nil, `{"type":"error","error":{"type":%q,"message":%s}}`+"\n", AnthropicType(code), m)
	}
	return fmt.Appendf(nil, `{"error":{"message":%s,"type":"warden_error","code":%d}}`+"\n", m, code)
}

// Anthropic reports whether path is one of Anthropic's Messages API paths.
func Anthropic(path string) bool { return strings.HasPrefix(path, "/v1/messages") }

// AnthropicType is the error type Anthropic's API gives a status code.
func AnthropicType(code int) string {
	switch code {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	return "api_error"
}

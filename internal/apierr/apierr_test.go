package apierr

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tidwall/gjson"
)

func TestWriteForTakesTheShapeOfTheAPI(t *testing.T) {
	for _, tc := range []struct {
		path, typePath, wantType string
		code                     int
	}{
		{"/v1/messages", "error.type", "request_too_large", http.StatusRequestEntityTooLarge},
		{"/v1/messages/count_tokens", "error.type", "authentication_error", http.StatusUnauthorized},
		{"/v1/chat/completions", "error.type", "warden_error", http.StatusRequestEntityTooLarge},
		{"/warden/policy", "error.type", "warden_error", http.StatusBadRequest},
	} {
		w := httptest.NewRecorder()
		WriteFor(w, tc.path, tc.code, `bad "thing"`)
		b := w.Body.Bytes()
		if w.Code != tc.code || !gjson.ValidBytes(b) {
			t.Fatalf("%s: status %d body %s", tc.path, w.Code, b)
		}
		if got := gjson.GetBytes(b, tc.typePath).Str; got != tc.wantType {
			t.Errorf("%s: %s = %q, want %q (%s)", tc.path, tc.typePath, got, tc.wantType, b)
		}
		if got := gjson.GetBytes(b, "error.message").Str; got != `bad "thing"` {
			t.Errorf("%s: message %q", tc.path, got)
		}
		if Anthropic(tc.path) != (gjson.GetBytes(b, "type").Str == "error") {
			t.Errorf("%s: top-level type of an Anthropic error: %s", tc.path, b)
		}
	}
}

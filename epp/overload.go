package epp

import (
	"net/http"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/lmwarden/warden/router"
)

// overloaded answers a request the core's admission queue let go (its
// bound passed) at once, telling the client to retry after the seconds
// given: 429 on OpenAI's paths; on Anthropic's, overloaded_error with 503,
// since Envoy's immediate response takes only the status codes its enum
// defines (529 is not one) and Anthropic's clients retry 503 as they
// retry 529.
func (x *exchange) overloaded(after int) ([]*extprocv3.ProcessingResponse, error) {
	code := router.OverloadStatus(x.path)
	if code != http.StatusTooManyRequests {
		code = http.StatusServiceUnavailable
	}
	out, err := x.refuse(code, router.OverloadMessage)
	if h := out[0].GetImmediateResponse().GetHeaders(); h != nil {
		h.SetHeaders = append(h.SetHeaders, &corev3.HeaderValueOption{
			Header: &corev3.HeaderValue{Key: "retry-after", RawValue: []byte(strconv.Itoa(after))}})
	}
	return out, err
}

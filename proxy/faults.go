package proxy

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// This file holds the proxy's answers to faults and hostile input: a stream
// that breaks off, an engine that does not answer or answers 5xx, requests
// without the API key (a body that is not JSON is refused on the request
// path: request.go's badContentType), and the warden's own error body.

// errHeaderTimeout is the cause of an attempt cancelled because the engine
// sent no response headers within Config.ResponseHeaderTimeout.
var errHeaderTimeout = errors.New("no response headers in time")

// errStreamIdle is the cause of an attempt cancelled because its stream
// sent nothing for Config.StreamIdleTimeout after its first byte.
var errStreamIdle = errors.New("nothing from the engine within --stream-idle-timeout")

// maxNamedErrorBody bounds the engine error bodies the proxy rewrites to name
// the replica; longer ones pass through unchanged.
const maxNamedErrorBody = 64 << 10

// streamBrokeOff is the message of a stream's closing error event.
func streamBrokeOff(rank int, err error) string {
	return fmt.Sprintf("replica %d: the engine's stream broke off (%v); the answer is incomplete", rank, err)
}

// nameReplicaInError prefixes the message of an engine's JSON error body
// with "replica N: " so that a client sees where it failed. Bodies that are
// large, not JSON or without a known message field pass unchanged.
func nameReplicaInError(resp *http.Response, rank int) {
	if resp.ContentLength > maxNamedErrorBody || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxNamedErrorBody+1))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	if err != nil || len(b) > maxNamedErrorBody {
		return
	}
	for _, path := range []string{"error.message", "message"} {
		v := gjson.GetBytes(b, path)
		if v.Type != gjson.String {
			continue
		}
		out, err := sjson.SetBytes(b, path, "replica "+strconv.Itoa(rank)+": "+v.Str)
		if err != nil {
			return
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{bytes.NewReader(out), rest}
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
		return
	}
}

// requireKey answers 401 unless the request carries Config.APIKey as
// "Authorization: Bearer KEY" or "x-api-key: KEY" (no key configured: all
// pass). The key is never logged or echoed.
func (p *Proxy) requireKey(h http.HandlerFunc) http.HandlerFunc {
	if p.cfg.APIKey == "" {
		return h
	}
	key := []byte(p.cfg.APIKey)
	return func(w http.ResponseWriter, r *http.Request) {
		got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !bearer {
			got = r.Header.Get("X-Api-Key")
		}
		if subtle.ConstantTimeCompare([]byte(got), key) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="warden"`)
			writeError(w, r, http.StatusUnauthorized,
				"missing or wrong API key: send it as Authorization: Bearer <key> or x-api-key: <key> (the warden's --api-key)")
			return
		}
		h(w, r)
	}
}

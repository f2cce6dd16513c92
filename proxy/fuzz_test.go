package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/identity"
)

// Fuzz targets for the parsers of the request path that read what clients
// and engines send: session extraction (with the body edits of prepare) and
// engine /metrics (the SSE usage tap's is in package tap). Their seeds run in every `go test`;
// `go test -fuzz FuzzX ./proxy` explores further.

var fuzzPaths = []string{"/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/completions", "/v1/embeddings"}

func FuzzPrepareSessionKey(f *testing.F) {
	for _, s := range []struct {
		path   byte
		header string
		body   string
	}{
		{0, "", `{"model":"m","stream":true,"messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}]}`},
		{0, "", `{"model":"m","prompt_cache_key":"abc","stream":true,"stream_options":{"include_usage":false},"messages":[]}`},
		{1, "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c", `{"model":"claude","system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2"},{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"user","content":"hi"}]}`},
		{1, "", `{"metadata":{"user_id":"{\"device_id\":\"d\",\"account_uuid\":\"\",\"session_id\":\"5b4c\"}"},"messages":[{"role":"user","content":[{"type":"text","text":"go"}]}]}`},
		{1, "", `{"metadata":{"user_id":"user_ab_account__session_ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c"},"system":[{"type":"text","text":"x-anthropic-billing-header: a"}]}`},
		{1, "", `{"system":[{"type":"text","text":"x-anthropic-billing-header: a"}  ]}`},
		{2, "", `{"model":"m","instructions":"be brief","input":[{"role":"user","content":"q"}],"client_metadata":{"session_id":"s1"}}`},
		{3, "\xff\xfe", `{"prompt":"x","user":"u1"}`},
		{0, strings.Repeat("k", 300), `not json`},
		{4, "", `[1,2,{"a":`},
	} {
		f.Add(s.path, s.header, []byte(s.body))
	}
	p, err := newProxy(testConfig{Config: router.Config{ServedModel: "m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}},
		[]router.Backend{{Rank: 0, URL: "http://127.0.0.1:1"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path byte, header string, body []byte) {
		r := httptest.NewRequest("POST", fuzzPaths[int(path)%len(fuzzPaths)], nil)
		if header != "" {
			r.Header["X-Claude-Code-Session-Id"] = []string{header}
		}
		req := mustPrepare(t, p, r, bytes.Clone(body))
		if len(req.key.Key) > identity.MaxKeyLen {
			t.Fatalf("key of %d bytes", len(req.key.Key))
		}
		if again := mustPrepare(t, p, r, bytes.Clone(body)); again.key != req.key {
			t.Fatalf("the key is not deterministic: %v then %v", req.key, again.key)
		}
		if req.refuse == "" && json.Valid(body) && !json.Valid(req.body) {
			t.Fatalf("prepare broke valid JSON:\n in: %s\nout: %s", body, req.body)
		}
		if k := identity.Extract(r.Header, body, nil); len(k.Key) > identity.MaxKeyLen {
			t.Fatalf("Extract: key of %d bytes", len(k.Key))
		}
	})
}

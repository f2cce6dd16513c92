package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/proxy/identity"
)

// Fuzz targets for the three parsers that read what clients and engines
// send: session extraction (with the body edits of prepare), engine
// /metrics, and the SSE usage tap. Their seeds run in every `go test`;
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
	p, err := New(Config{ServedModel: "m", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		[]Backend{{Rank: 0, URL: "http://127.0.0.1:1"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path byte, header string, body []byte) {
		r := httptest.NewRequest("POST", fuzzPaths[int(path)%len(fuzzPaths)], nil)
		if header != "" {
			r.Header["X-Claude-Code-Session-Id"] = []string{header}
		}
		req := p.prepare(r, bytes.Clone(body))
		if len(req.key.Key) > identity.MaxKeyLen {
			t.Fatalf("key of %d bytes", len(req.key.Key))
		}
		if again := p.prepare(r, bytes.Clone(body)); again.key != req.key {
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

func FuzzParseMetrics(f *testing.F) {
	f.Add(metricsText(3, 1, 0.25, 1000, 600))
	f.Add("vllm:prefix_cache_hits 5\nvllm:prefix_cache_queries 9\nvllm:gpu_cache_usage_perc 0.5\n")
	f.Add(`# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="-3"} 1
vllm:cache_config_info{block_size="99999999999",num_gpu_blocks="99999999999"} 1
`)
	f.Add("# TYPE x counter\nx_total NaN\nx_total +Inf\n")
	f.Add("{\"not\":\"metrics\"}")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := parseMetrics(strings.NewReader(text))
		if err != nil {
			return
		}
		if s.kvCapacity < 0 {
			t.Fatalf("negative KV capacity %d", s.kvCapacity)
		}
		var e engineState
		e.apply(s, time.Unix(1_800_000_000, 0))
		e.apply(s, time.Unix(1_800_000_000, 0))
	})
}

// chunkReader hands out data n bytes at a time, then err (io.EOF if nil).
type chunkReader struct {
	data []byte
	n    int
	err  error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkReader) Close() error { return nil }

var errFuzzBroken = errors.New("engine gone")

func FuzzTap(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":16}}}\n\nevent: message_delta\ndata: {\"usage\":{\"output_tokens\":7}}\n\n",
		"event: response.completed\ndata: {\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1,\"input_tokens_details\":{\"cached_tokens\":0}}}}\n\n",
		"data: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: partial",
		`{"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":1e99}}\n\n",
	} {
		f.Add([]byte(s), uint8(0), uint8(7), false, false)
		f.Add([]byte(s), uint8(1), uint8(1), true, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, kind, chunk uint8, strip, broken bool) {
		k := []apiKind{apiOpenAI, apiAnthropic, apiResponses, apiNone}[int(kind)%4]
		src := &chunkReader{data: bytes.Clone(data), n: int(chunk%64) + 1}
		if broken {
			src.err = errFuzzBroken
		}
		tp := newTap(src, k, true, strip)
		event := streamErrorEvent(k, "replica 0: broke off")
		tp.fail = func(error) []byte { return event }
		out, err := io.ReadAll(tp)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if broken {
			if tp.failed == nil || !bytes.HasSuffix(out, event) {
				t.Fatalf("a broken stream did not end with the error event: %q", out)
			}
			out = bytes.TrimSuffix(out, event)
			out = bytes.TrimSuffix(out, []byte("\n"))
			out = bytes.TrimSuffix(out, []byte("\n"))
			data = bytes.TrimRight(data, "\n")
			out = bytes.TrimRight(out, "\n")
		}
		switch {
		case !strip && !bytes.Equal(out, data):
			t.Fatalf("pass-through changed the bytes:\n in: %q\nout: %q", data, out)
		case strip && !bytes.Contains(data, []byte("usage")) && !bytes.Equal(out, data):
			t.Fatalf("strip changed a stream without usage:\n in: %q\nout: %q", data, out)
		case len(out) > len(data):
			t.Fatalf("the tap added bytes:\n in: %q\nout: %q", data, out)
		}
	})
}

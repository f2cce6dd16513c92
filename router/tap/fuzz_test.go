package tap

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/tidwall/gjson"
)

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
		k := []Kind{OpenAI, Anthropic, Responses, None}[int(kind)%4]
		src := &chunkReader{data: bytes.Clone(data), n: int(chunk%64) + 1}
		if broken {
			src.err = errFuzzBroken
		}
		event := ErrorEvent(k, "replica 0: broke off")
		tp := New(src, k, Options{Stream: true, Strip: strip, Fail: func(error) []byte { return event }})
		out, err := io.ReadAll(tp)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if broken {
			if tp.Failed() == nil || !bytes.HasSuffix(out, event) {
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

// FuzzUsageLookupSkips: skipping the lookups whose key d cannot hold finds
// the usage the three lookups find, for any document.
func FuzzUsageLookupSkips(f *testing.F) {
	for _, s := range []string{
		`{"choices":[],"usage":{"prompt_tokens":1}}`, `{"usage":null,"message":{"usage":{"input_tokens":2}}}`,
		`{"response":{"usage":{"input_tokens":3}},"usage":1}`, `{"message":1,"message":{"usage":{}}}`,
		`{"us\u0061ge":{"x":1}}`, `{"m\u0065ssage":{"usage":{"input_tokens":4}}}`, `{}"usage"{0`, `{"usage":{"a":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		var want gjson.Result
		for _, path := range []string{"usage", "message.usage", "response.usage"} {
			if want = gjson.GetBytes(d, path); want.IsObject() {
				break
			}
		}
		for _, kind := range []Kind{OpenAI, Anthropic, Responses} {
			ref := &Tap{kind: kind}
			if want.IsObject() {
				ref.usage.Known = true
				ref.parseUsage(want)
			}
			tp := &Tap{kind: kind}
			if got := tp.parseJSON(d); got != want.IsObject() || tp.usage != ref.usage {
				t.Errorf("%q kind %d: %v %+v, want %v %+v", d, kind, got, tp.usage, want.IsObject(), ref.usage)
			}
		}
	})
}

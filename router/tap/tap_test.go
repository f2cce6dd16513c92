package tap

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
)

const openaiStream = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
	"data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n" +
	"data: [DONE]\n\n"

func TestTap(t *testing.T) {
	noUsageChunk := strings.Replace(openaiStream, "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n", "", 1)
	tests := []struct {
		name      string
		kind      Kind
		stream    bool
		strip     bool
		in        string
		wantOut   string
		wantUsage Usage
	}{
		{"OpenAI stream, client asked for usage: passed through, usage read", OpenAI, true, false,
			openaiStream, openaiStream, Usage{true, 40, 32, 2}},
		{"OpenAI stream, warden asked: the usage-only chunk is dropped, nothing else", OpenAI, true, true,
			openaiStream, noUsageChunk, Usage{true, 40, 32, 2}},
		{"CRLF line endings are handled", OpenAI, true, true,
			strings.ReplaceAll(openaiStream, "\n", "\r\n"), strings.ReplaceAll(noUsageChunk, "\n", "\r\n"), Usage{true, 40, 32, 2}},
		{"OpenAI stream without any usage: unknown", OpenAI, true, true,
			noUsageChunk, noUsageChunk, Usage{}},
		{"an unterminated last event passes as is", OpenAI, true, true,
			"data: {\"choices\":[{\"delta\":{}}]}\n\ndata: {\"cho", "data: {\"choices\":[{\"delta\":{}}]}\n\ndata: {\"cho", Usage{}},
		{"OpenAI JSON", OpenAI, false, false,
			`{"choices":[{}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`, `{"choices":[{}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`,
			Usage{true, 9, 0, 1}},
		{"Anthropic stream: message_start input, message_delta output (vLLM: input_tokens is the whole prompt)", Anthropic, true, false,
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":200,\"cache_read_input_tokens\":160,\"output_tokens\":1}}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":12}}\n\n",
			"", Usage{true, 200, 160, 12}},
		{"Anthropic JSON with Anthropic's convention (cache read > input)", Anthropic, false, false,
			`{"usage":{"input_tokens":20,"cache_read_input_tokens":160,"output_tokens":5}}`, "", Usage{true, 180, 160, 5}},
		{"a usage key spelled with an escape is still read (the quick look for the word falls back to a parse)", OpenAI, true, false,
			"data: {\"choices\":[],\"us\\u0061ge\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\n\n",
			"data: {\"choices\":[],\"us\\u0061ge\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\n\n", Usage{true, 7, 0, 1}},
		{"Responses stream: response.completed", Responses, true, false,
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":50,\"output_tokens\":4,\"input_tokens_details\":{\"cached_tokens\":48}}}}\n\n",
			"", Usage{true, 50, 48, 4}},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			name := tt.name
			if oneByte {
				name += " (one byte per read)"
			}
			t.Run(name, func(t *testing.T) {
				var r io.Reader = strings.NewReader(tt.in)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				tp := New(io.NopCloser(r), tt.kind, Options{Stream: tt.stream, Strip: tt.strip})
				out, err := io.ReadAll(tp)
				if err != nil {
					t.Fatal(err)
				}
				want := tt.wantOut
				if want == "" {
					want = tt.in
				}
				if diff := cmp.Diff(want, string(out)); diff != "" {
					t.Errorf("client bytes (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantUsage, tp.Usage()); diff != "" {
					t.Errorf("usage (-want +got):\n%s", diff)
				}
				if tp.FirstByte().IsZero() {
					t.Error("first byte time not recorded")
				}
			})
		}
	}
}

func TestTapGivesUpOnHugeJSON(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("x", maxJSONTap) + `","usage":{"prompt_tokens":1}}`
	tp := New(io.NopCloser(strings.NewReader(big)), OpenAI, Options{Stream: false, Strip: false})
	n, _ := io.Copy(io.Discard, tp)
	if n != int64(len(big)) || tp.Usage().Known {
		t.Errorf("copied %d of %d bytes, usage %+v", n, len(big), tp.Usage())
	}
}

func TestStreamErrorEventsAreValidSSEWithJSONData(t *testing.T) {
	for _, kind := range []Kind{OpenAI, Anthropic, Responses} {
		ev := string(ErrorEvent(kind, `replica 3: "quoted" broke off`))
		if !strings.HasSuffix(ev, "\n\n") || strings.Count(ev, "\n\n") != 1 {
			t.Errorf("kind %d: not one SSE event: %q", kind, ev)
		}
		data := simproc.LastEvent(ev)
		msg := gjson.Get(data, "error.message")
		if kind == Responses {
			msg = gjson.Get(data, "message")
		}
		if !gjson.Valid(data) || msg.Str != `replica 3: "quoted" broke off` {
			t.Errorf("kind %d: data %s", kind, data)
		}
	}
}

// TestWriteFedTapReadsUsage: a tap fed in chunks (a gateway's external
// processor sees the answer so) reads the same usage and first byte as one
// that reads the body, for a stream and for a whole JSON answer.
func TestWriteFedTapReadsUsage(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\ndata: [DONE]\n\n"
	whole := `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":100,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":64}}}`
	for _, tc := range []struct {
		name   string
		body   string
		stream bool
	}{{"stream", stream, true}, {"json", whole, false}} {
		at := time.Unix(1000, 0)
		tp := New(nil, OpenAI, Options{Stream: tc.stream, Now: func() time.Time { return at }})
		for i := 0; i < len(tc.body); i += 7 { // chunks that split lines and JSON
			tp.Write([]byte(tc.body[i:min(i+7, len(tc.body))]))
		}
		tp.End(nil)
		if u := tp.Usage(); !u.Known || u.Prompt != 100 || u.Cached != 64 || u.Completion != 3 {
			t.Errorf("%s: usage %+v", tc.name, u)
		}
		if !tp.FirstByte().Equal(at) || tp.Failed() != nil {
			t.Errorf("%s: first byte %v, failed %v", tc.name, tp.FirstByte(), tp.Failed())
		}
	}
}

// TestFirstTokenIsTheFirstContent: a stream's first token is its first
// event with text, reasoning or a tool call, in each API's shape: not the
// role-only chunk, message_start, a ping or an empty delta before it.
func TestFirstTokenIsTheFirstContent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    Kind
		before  []string // events without content
		content string
	}{
		{"openai", OpenAI, []string{`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, `{"choices":[{"delta":{"content":""}}]}`},
			`{"choices":[{"delta":{"content":"Hi"}}]}`},
		{"openai tool call", OpenAI, []string{`{"choices":[{"delta":{"role":"assistant"}}]}`},
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"read"}}]}}]}`},
		{"openai reasoning", OpenAI, nil, `{"choices":[{"delta":{"reasoning_content":"think"}}]}`},
		{"anthropic", Anthropic, []string{`{"type":"message_start","message":{"usage":{"input_tokens":5}}}`, `{"type":"ping"}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`},
		{"responses", Responses, []string{`{"type":"response.created"}`, `{"type":"response.output_item.added"}`},
			`{"type":"response.output_text.delta","delta":"Hi"}`},
	} {
		now := time.Unix(100, 0)
		tp := New(nil, tc.kind, Options{Stream: true, Now: func() time.Time { return now }})
		for _, ev := range tc.before {
			tp.Write([]byte("data: " + ev + "\n\n"))
			now = now.Add(time.Second)
		}
		if !tp.FirstToken().IsZero() {
			t.Errorf("%s: a first token at %v before any content", tc.name, tp.FirstToken())
		}
		want := now
		tp.Write([]byte("data: " + tc.content + "\n\n"))
		now = now.Add(time.Second)
		tp.Write([]byte("data: " + tc.content + "\n\n"))
		if !tp.FirstToken().Equal(want) || !tp.FirstByte().Equal(time.Unix(100, 0)) {
			t.Errorf("%s: first token %v (want %v), first byte %v", tc.name, tp.FirstToken(), want, tp.FirstByte())
		}
	}
}

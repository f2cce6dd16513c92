package bench

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkTurnBody is the client-side cost of building the last turn's
// body of a reference session (system 3.5k + first 7.3k + 5 x 400 tokens
// + 5 replies of 256 tokens, about 60 KB).
func BenchmarkTurnBody(b *testing.B) {
	sizes := Sizes{SystemTokens: 3500, FirstTokens: 7300, TurnTokens: 400, CharsPerToken: 4}
	for _, api := range []API{APIAnthropic, APIOpenAI} {
		b.Run(string(api), func(b *testing.B) {
			text := newSessionText(1, sizes, 4, 0)
			c := newConversation(api, "m", systemPrompt(1, sizes), newUUID(), newDeviceID(), "", 256)
			reply := newTextGen("reply").text(1024)
			for i := 0; i < 6; i++ {
				c.add("user", text.next())
				if i < 5 {
					c.add("assistant", reply)
				}
			}
			b.SetBytes(int64(len(c.body())))
			b.ReportAllocs()
			for b.Loop() {
				_ = c.body()
			}
		})
	}
}

// BenchmarkReadStream parses one 256-token streamed reply.
func BenchmarkReadStream(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12000}}}\n\n")
	for i := 0; i < 256; i++ {
		fmt.Fprintf(&sb, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" word%d\"}}\n\n", i)
	}
	sb.WriteString("data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":256}}\n\ndata: {\"type\":\"message_stop\"}\n\n")
	stream := sb.String()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		var r turnResult
		if err := readStream(&http.Response{StatusCode: 200, Body: nopBody{strings.NewReader(stream)}}, APIAnthropic, &r, time.Now); err != nil || r.OutputTokens != 256 {
			b.Fatal(err, r.OutputTokens)
		}
	}
}

type nopBody struct{ *strings.Reader }

func (nopBody) Close() error { return nil }

package bench

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// pipedStream feeds readStream through a synchronous pipe, so the test
// knows what the reader has consumed: io.Pipe's Write returns only once a
// Read took its bytes, and the stream's line scanner asks for more bytes only
// after it has handed over every complete line it holds.
type pipedStream struct {
	t  *testing.T
	w  *io.PipeWriter
	rc chan error
}

func startPiped(t *testing.T, api API, r *turnResult, now func() time.Time) *pipedStream {
	pr, pw := io.Pipe()
	p := &pipedStream{t: t, w: pw, rc: make(chan error, 1)}
	go func() {
		p.rc <- readStream(&http.Response{StatusCode: 200, Header: http.Header{}, Body: pr}, api, r, now)
	}()
	return p
}

// send writes s and then a comment line: once both writes return, every
// line of s has been handled by the reader. It fails the test when the
// reader has stopped reading (the pipe is closed).
func (p *pipedStream) send(s string) {
	p.t.Helper()
	for _, b := range []string{s, ": keep-alive\n\n"} {
		if _, err := io.WriteString(p.w, b); err != nil {
			p.t.Fatalf("writing %q: %v (the bench stopped reading the response)", b, err)
		}
	}
}

// The first token is the first content delta: neither the response
// headers, message_start, content_block_start, a ping nor a role-only chunk
// stamps it. Every stream is read past its final event to the end of the
// body (EOF), as an agent's client does, so the connection can be reused.
func TestFirstTokenIsContentAndStreamsAreReadToEOF(t *testing.T) {
	for _, c := range []struct {
		api           API
		before, first string
		final         string
	}{
		{APIAnthropic,
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9}}}\n\n" +
				"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
				"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"\"}}\n\n",
			"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
			"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":1}}\n\ndata: {\"type\":\"message_stop\"}\n\n"},
		{APIOpenAI,
			"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}],\"usage\":null}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n",
			"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
			"data: [DONE]\n\n"},
	} {
		t.Run(string(c.api), func(t *testing.T) {
			var phase atomic.Int64 // the fake clock: seconds since the epoch
			now := func() time.Time { return time.Unix(phase.Load(), 0) }
			var r turnResult
			p := startPiped(t, c.api, &r, now)
			p.send(c.before) // headers were read before: the response existed
			phase.Store(1)
			p.send(c.first)
			phase.Store(2)
			p.send(c.final)
			p.send("\n") // after the final event: still read, not dropped
			_ = p.w.Close()
			if err := <-p.rc; err != nil {
				t.Fatal(err)
			}
			if got := r.FirstToken.Unix(); got != 1 {
				t.Errorf("first token stamped in phase %d, want 1 (the first content delta)", got)
			}
			if r.Text != "Hi" {
				t.Errorf("text %q", r.Text)
			}
		})
	}
}

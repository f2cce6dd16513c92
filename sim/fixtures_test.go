package sim_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestMain(m *testing.M) { simproc.Main(m) }

var client = &http.Client{Timeout: 60 * time.Second}

// post sends body (a string or a value to JSON-encode) and returns the status
// and the parsed response body.
func post(t *testing.T, url string, body any) (int, gjson.Result) {
	t.Helper()
	resp := postRaw(t, url, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, gjson.ParseBytes(b)
}

func postRaw(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	var raw []byte
	if s, ok := body.(string); ok {
		raw = []byte(s)
	} else {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

type sseEvent struct {
	name string
	data gjson.Result
	raw  string
}

// sseReader reads server-sent events one at a time.
type sseReader struct{ sc *bufio.Scanner }

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	return &sseReader{sc: sc}
}

// next returns the next event, or false at the end of the stream.
func (s *sseReader) next() (sseEvent, bool) {
	var ev sseEvent
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev.raw != "" || ev.name != "" {
				return ev, true
			}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.raw = strings.TrimPrefix(line, "data: ")
			ev.data = gjson.Parse(ev.raw)
		}
	}
	return ev, false
}

func readAllEvents(t *testing.T, resp *http.Response) []sseEvent {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out []sseEvent
	r := newSSEReader(resp.Body)
	for {
		ev, ok := r.next()
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// words returns about n tokens of deterministic English-like text.
func words(seed string, n int) string {
	vocab := strings.Fields("the agent reads a file then edits code and runs tests while the model thinks about " +
		"functions types errors values streams buffers caches blocks tokens prompts replicas engines")
	var b strings.Builder
	b.WriteString(seed)
	for i := 0; i < n; i++ {
		b.WriteString(" ")
		b.WriteString(vocab[(i*7+len(seed))%len(vocab)])
	}
	return b.String()
}

func msg(role, content string) map[string]any {
	return map[string]any{"role": role, "content": content}
}

func get(t *testing.T, url string) (int, gjson.Result) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, gjson.ParseBytes(b)
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func parse(raw []byte) gjson.Result { return gjson.ParseBytes(raw) }

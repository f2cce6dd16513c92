package decision

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// sessionHash is the first 12 hex digits of the key's SHA-256 ("" for no
// key): Session's reference.
func sessionHash(key string) string {
	if key == "" {
		return ""
	}
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:6])
}

// line is d as Line, the reference AppendJSON must match.
func (d *Record) line() Line {
	l := Line{Time: d.At.Format(time.RFC3339Nano), RequestID: d.RequestID, Source: d.Source,
		Session: sessionHash(d.Key), Subagent: d.Subagent, Policy: d.Policy, Route: d.Route, Replica: d.Replica,
		WaitS: d.Wait.Seconds(), Prompt: d.Prompt, Cached: d.Cached, Completion: d.Completion,
		TTFTS: -1, DurationS: d.Duration.Seconds(), Status: d.Status}
	if d.TTFT >= 0 {
		l.TTFTS = d.TTFT.Seconds()
	}
	return l
}

func TestSession(t *testing.T) {
	for _, k := range []string{"", "k", "alice@example.com"} {
		if got := Session(k); got != sessionHash(k) {
			t.Errorf("Session(%q) = %q, want %q", k, got, sessionHash(k))
		}
	}
}

// testRecord is a typical line's record (the router's tests and benchmarks
// use the same shape).
func testRecord(i int) Record {
	return Record{At: time.Unix(int64(i), 0), RequestID: fmt.Sprintf("req-%d", i), Source: "claude-code-header",
		Key: fmt.Sprintf("session-%d", i%50), Policy: "adaptive", Route: "sticky", Replica: i % 4,
		Prompt: 12_000, Cached: 11_000, Completion: 256, TTFT: 300 * time.Millisecond, Duration: 4 * time.Second, Status: 200}
}

// TestLineEncoding: the hand-written encoder writes what encoding/json
// writes for Line, byte for byte, whatever a client puts in its request
// id.
func TestLineEncoding(t *testing.T) {
	ids := []string{"", "t-1", `quo"te`, `back\slash`, "tab\there", "ünïcode", "\xff\xfe bad utf-8", "<b>&amp;</b>", "\u2028", strings.Repeat("x", 128)}
	for i, id := range ids {
		d := testRecord(i)
		d.RequestID = id
		d.At = time.Date(2030, 1, 2, 3, 4, 5, i*1000, time.FixedZone("x", 3600*i))
		d.Wait = []time.Duration{0, time.Nanosecond, 999 * time.Nanosecond, time.Microsecond, 1234567 * time.Microsecond, 100 * time.Hour}[i%6]
		d.TTFT = []time.Duration{-1, 0, 7 * time.Nanosecond, 250 * time.Millisecond}[i%4]
		d.Key = []string{"", "k", "alice@example.com"}[i%3]
		d.Subagent = i%2 == 1
		want, _ := json.Marshal(d.line())
		if got := d.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("id %q:\n got %s\nwant %s", id, got, want)
		}
	}
}

// BenchmarkDecisionLogEncode is the writer's work per line, off the
// request path.
func BenchmarkDecisionLogEncode(b *testing.B) {
	d := testRecord(1)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = d.AppendJSON(buf[:0])
	}
}

// Package decision is the decision log's line (warden serve/route
// --decision-log): one JSON object per routed request, the Record the
// request path hands over, its encoding, and the request id header it is
// joined by. It is a leaf: `warden bench` reads the log through it without
// linking the router, and the router's writer (router/decisionlog.go)
// encodes with it.
package decision

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"
)

// RequestIDHeader is the client's request id, recorded in the decision log
// as it was sent (cut to MaxRequestID bytes); the warden makes none up.
const RequestIDHeader = "X-Request-Id"

// MaxRequestID is the longest request id kept; longer ones are cut.
const MaxRequestID = 128

// Record is one routed request as the request path hands it over; the
// writer encodes it (AppendJSON: the session key is hashed there, never
// written).
type Record struct {
	At         time.Time // when the request ended (the core's clock)
	RequestID  string
	Source     string // how the session was identified
	Key        string // the placement key: hashed into the line
	Subagent   bool
	Policy     string
	Route      string
	Replica    int
	Wait       time.Duration // held at the warden (place.ReasonWait) before placement
	Prompt     uint64
	Cached     uint64
	Completion uint64
	TTFT       time.Duration // time to the first answer content (tap.Tap.FirstToken); < 0: none
	Duration   time.Duration
	Status     int
	// Predicted is the prompt tokens placement expected cached on the
	// chosen replica (capped by the prompt's whole blocks before its last
	// token); PredictedFrom says from what: "ledger" (the engine's KV
	// events) or "estimate". MissReason is why uncached tokens missed
	// (router/ledger's Miss* reasons; the avoidable part's when there is
	// one), "" when the turn was fully cached or reported no usage.
	Predicted     int
	PredictedFrom string
	MissReason    string
}

// Line is the decision log's line format (one JSON object a line).
// Session is a short hash of the placement key (the raw key may be a
// person's id); it tells conversations apart within a log and across
// restarts, nothing more. TTFTS is the time to the first answer content,
// -1 when none arrived (its key, ttfb_s, is the log format's since its
// first release, kept for the files and tools that read it).
type Line struct {
	Time       string  `json:"time"` // RFC 3339 with nanoseconds, the core's clock, when the request ended
	RequestID  string  `json:"request_id"`
	Source     string  `json:"session_source"`
	Session    string  `json:"session"`
	Subagent   bool    `json:"subagent"`
	Policy     string  `json:"policy"`
	Route      string  `json:"route"`
	Replica    int     `json:"replica"`
	WaitS      float64 `json:"queue_wait_s"`
	Prompt     uint64  `json:"prompt_tokens"`
	Cached     uint64  `json:"cached_tokens"`
	Completion uint64  `json:"completion_tokens"`
	TTFTS      float64 `json:"ttfb_s"`
	DurationS  float64 `json:"duration_s"`
	Status     int     `json:"status"`
	Predicted  int     `json:"predicted_cached_tokens"`
	PredFrom   string  `json:"predicted_from"`
	MissReason string  `json:"miss_reason"`
}

// AppendJSON appends d as one Line object, byte for byte as encoding/json
// writes it, without reflection (the writer's cost per line).
func (d *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = d.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request_id":`...)
	b = appendJSONString(b, d.RequestID)
	b = append(b, `,"session_source":`...)
	b = appendJSONString(b, d.Source)
	b = append(b, `,"session":"`...)
	b = appendSession(b, d.Key)
	b = append(b, `","subagent":`...)
	b = strconv.AppendBool(b, d.Subagent)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, d.Policy)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, d.Route)
	b = append(b, `,"replica":`...)
	b = strconv.AppendInt(b, int64(d.Replica), 10)
	b = append(b, `,"queue_wait_s":`...)
	b = appendJSONFloat(b, d.Wait.Seconds())
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendUint(b, d.Prompt, 10)
	b = append(b, `,"cached_tokens":`...)
	b = strconv.AppendUint(b, d.Cached, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendUint(b, d.Completion, 10)
	b = append(b, `,"ttfb_s":`...)
	if d.TTFT >= 0 {
		b = appendJSONFloat(b, d.TTFT.Seconds())
	} else {
		b = append(b, "-1"...)
	}
	b = append(b, `,"duration_s":`...)
	b = appendJSONFloat(b, d.Duration.Seconds())
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(d.Status), 10)
	b = append(b, `,"predicted_cached_tokens":`...)
	b = strconv.AppendInt(b, int64(d.Predicted), 10)
	b = append(b, `,"predicted_from":`...)
	b = appendJSONString(b, d.PredictedFrom)
	b = append(b, `,"miss_reason":`...)
	b = appendJSONString(b, d.MissReason)
	return append(b, '}')
}

// Session is the line's session field for a placement key: the first 12
// hex digits of its SHA-256, "" for no key.
func Session(key string) string { return string(appendSession(nil, key)) }

func appendSession(b []byte, key string) []byte {
	if key == "" {
		return b
	}
	h := sha256.Sum256([]byte(key))
	return hex.AppendEncode(b, h[:6])
}

// appendJSONString appends s quoted: plain printable ASCII as it is, any
// other string (a client's request id may hold anything) through
// encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json does (shortest form; the
// exponent form below 1e-6, without a leading zero in the exponent).
func appendJSONFloat(b []byte, f float64) []byte {
	abs, format := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// ReadLines parses a decision log, one Line per line; a line that is not a
// whole Line of this schema (an unknown field included) is an error.
func ReadLines(r io.Reader) ([]Line, error) {
	var out []Line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l Line
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return out, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// ReadFiles parses the decision log files given, in order (ReadLines on
// each); an error names the file.
func ReadFiles(paths ...string) ([]Line, error) {
	var out []Line
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return out, err
		}
		lines, err := ReadLines(f)
		f.Close()
		if err != nil {
			return out, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, lines...)
	}
	return out, nil
}

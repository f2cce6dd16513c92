package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/usage"
)

// API selects the wire protocol and the way the session id travels.
type API string

const (
	// APIAnthropic sends POST /v1/messages?beta=true the way Claude Code does:
	// header X-Claude-Code-Session-Id, body metadata.user_id as a JSON string
	// with session_id, system as text blocks, stream true.
	APIAnthropic API = "anthropic"
	// APIOpenAI sends POST /v1/chat/completions the way Codex-style OpenAI
	// clients do: header session-id, body prompt_cache_key, streamed with
	// stream_options.include_usage.
	APIOpenAI API = "openai"
)

// ReplicaHeader is the response header in which the warden names the replica
// (rank) that served a request.
const ReplicaHeader = "X-Warden-Replica"

// conversation is one session's request state. The messages are kept as one
// growing JSON fragment so a turn costs one append, not a re-encode of the
// whole history.
type conversation struct {
	api       API
	sessionID string
	agentID   string       // a subagent's id, sent as AgentHeader ("" = the session's own conversation)
	turns     int          // user messages so far: the turn number in the request id
	head      []byte       // everything before the messages array's content
	tail      []byte       // everything after it
	msgs      bytes.Buffer // encoded messages, comma separated
}

// newConversation prepares the fixed parts of every request body of a session.
// billing, when not empty, is sent as the first system block (Anthropic
// only), as Claude Code sends its billing line.
func newConversation(api API, model, system, sessionID, deviceID, billing string, maxTokens int) *conversation {
	c := &conversation{api: api, sessionID: sessionID}
	m := mustJSON(model)
	switch api {
	case APIOpenAI:
		// ignore_eos: every turn produces max_tokens, on real engines as on
		// the simulator (vLLM's sampling parameter, as its own benchmarks use).
		c.head = fmt.Appendf(nil, `{"model":%s,"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"prompt_cache_key":%s,"messages":[`,
			m, maxTokens, mustJSON(sessionID))
		c.msgs.WriteString(`{"role":"system","content":`)
		c.msgs.Write(mustJSON(system))
		c.msgs.WriteByte('}')
		c.tail = []byte(`]}`)
	default:
		userID := mustJSON(map[string]string{"device_id": deviceID, "account_uuid": "", "session_id": sessionID})
		c.head = fmt.Appendf(nil, `{"model":%s,"messages":[`, m)
		blocks := fmt.Appendf(nil, `{"type":"text","text":%s}`, mustJSON(system))
		if billing != "" {
			blocks = fmt.Appendf(nil, `{"type":"text","text":%s},%s`, mustJSON(billing), blocks)
		}
		// ignore_eos: the simulator generates max_tokens with it; vLLM's
		// Messages endpoint drops the field (0.32 has no such parameter
		// there), so on a real engine an Anthropic turn ends at the model's
		// end of sequence, within max_tokens, as the reference's did.
		c.tail = fmt.Appendf(nil, `],"system":[%s],"metadata":{"user_id":%s},"max_tokens":%d,"ignore_eos":true,"stream":true}`,
			blocks, mustJSON(string(userID)), maxTokens)
	}
	return c
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings and string maps always encode
	}
	return b
}

// add appends one message exactly as given.
func (c *conversation) add(role, text string) {
	if role == "user" {
		c.turns++
	}
	if c.msgs.Len() > 0 {
		c.msgs.WriteByte(',')
	}
	c.msgs.WriteString(`{"role":`)
	c.msgs.Write(mustJSON(role))
	if c.api == APIOpenAI {
		c.msgs.WriteString(`,"content":`)
		c.msgs.Write(mustJSON(text))
	} else {
		c.msgs.WriteString(`,"content":[{"type":"text","text":`)
		c.msgs.Write(mustJSON(text))
		c.msgs.WriteString(`}]`)
	}
	c.msgs.WriteByte('}')
}

// body returns the request body for the conversation so far.
func (c *conversation) body() []byte {
	b := make([]byte, 0, len(c.head)+c.msgs.Len()+len(c.tail))
	b = append(b, c.head...)
	b = append(b, c.msgs.Bytes()...)
	return append(b, c.tail...)
}

// newRequest builds the HTTP request of the next turn against base.
func (c *conversation) newRequest(ctx context.Context, base string) (*http.Request, error) {
	path := "/v1/messages?beta=true"
	if c.api == APIOpenAI {
		path = "/v1/chat/completions"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(c.body()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.api == APIOpenAI {
		req.Header.Set("session-id", c.sessionID)
		req.Header.Set("Authorization", "Bearer sk-dummy")
	} else {
		req.Header.Set("X-Claude-Code-Session-Id", c.sessionID)
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("x-api-key", "sk-dummy")
		req.Header.Set("x-app", "cli")
	}
	if c.agentID != "" {
		req.Header.Set(AgentHeader, c.agentID)
	}
	req.Header.Set(RequestIDHeader, requestID(c.sessionID, c.agentID, c.turns)) // the decision log's join key
	return req, nil
}

// turnResult is what one streamed turn produced, in wall-clock time.
type turnResult struct {
	Start, FirstToken, End time.Time // FirstToken is zero when no content arrived
	Text                   string    // the assistant's reply, as received
	PromptTokens           int       // from the usage report (0 if none)
	CachedTokens           int       // cached prompt tokens reported by the engine (0 if none)
	OutputTokens           int       // from the usage report, else the number of content deltas
	UsageSeen              bool
	Replica                string // X-Warden-Replica response header, "" if absent
	Err                    error
	// Canceled: the bench ended the turn itself (Ctrl-C, or the end of the
	// stage's drain), so Err says nothing of the server.
	Canceled bool
}

// doTurn sends one turn and reads its stream to the end. rtt (wall time)
// models a client far from the server: the request reaches the server rtt
// after the turn starts, so the whole round trip counts toward the turn's
// TTFB and duration, as it does for a client measuring over the internet,
// and the server sees a gap of rtt between a session's turns.
func doTurn(ctx context.Context, hc *http.Client, base string, c *conversation, rtt time.Duration, now func() time.Time) turnResult {
	r := turnResult{Start: now()}
	err := sleepCtx(ctx, rtt)
	var req *http.Request
	if err == nil {
		req, err = c.newRequest(ctx, base)
	}
	if err == nil {
		var resp *http.Response
		resp, err = hc.Do(req)
		if err == nil {
			r.Replica = resp.Header.Get(ReplicaHeader)
			err = readStream(resp, c.api, &r, now)
		}
	}
	r.Err = err
	r.Canceled = err != nil && ctx.Err() != nil
	r.End = now()
	return r
}

// sleepCtx waits d (nothing when d <= 0) or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// drainLimit bounds what is read and thrown away of an error's body so that
// its connection can be reused.
const drainLimit = 1 << 20

// readStream consumes an SSE response (Anthropic or OpenAI chunks) into r.
// The first-token time is the first non-empty content delta, not the
// response headers, message_start or a role-only chunk. It reads the body to
// its end (EOF), past the final event, as an agent's client does: only a
// response read to its end lets the transport reuse the connection (a body
// closed early is a connection closed). A stream that fails midway is
// closed at once.
func readStream(resp *http.Response, api API, r *turnResult, now func() time.Time) error {
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var text strings.Builder
	deltas, done := 0, false
	for sc.Scan() { // to EOF: what follows the final event is read and ignored
		if done {
			continue
		}
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		data := bytes.TrimSpace(line[5:])
		var piece string
		var err error
		if api == APIOpenAI {
			piece, done, err = openAIChunk(data, r)
		} else {
			piece, done, err = anthropicEvent(data, r)
		}
		if err != nil {
			return err
		}
		if piece != "" {
			if r.FirstToken.IsZero() {
				r.FirstToken = now()
			}
			deltas++
			text.WriteString(piece)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading stream: %w", err)
	}
	if !done {
		return fmt.Errorf("stream ended without its final event")
	}
	r.Text = text.String()
	if !r.UsageSeen {
		r.OutputTokens = deltas
	}
	return nil
}

// anthropicEvent handles one Anthropic Messages SSE data payload.
func anthropicEvent(data []byte, r *turnResult) (piece string, done bool, err error) {
	ev := gjson.ParseBytes(data)
	switch ev.Get("type").String() {
	case "message_start":
		anthropicUsage(ev.Get("message.usage"), r)
	case "content_block_delta":
		if d := ev.Get("delta"); d.Get("type").String() == "text_delta" {
			piece = d.Get("text").String()
		}
	case "message_delta":
		anthropicUsage(ev.Get("usage"), r)
	case "message_stop":
		done = true
	case "error":
		err = fmt.Errorf("stream error: %s", ev.Get("error.message").String())
	}
	return piece, done, err
}

// anthropicUsage reads a usage object of message_start or message_delta
// (usage.ParseAnthropic: input_tokens excludes the cache).
func anthropicUsage(u gjson.Result, r *turnResult) {
	a := usage.ParseAnthropic(u)
	if a.HasPrompt {
		r.PromptTokens = int(a.Prompt)
	}
	if a.HasCached {
		r.CachedTokens = int(a.Cached)
	}
	if a.Output > 0 {
		r.OutputTokens = int(a.Output)
		r.UsageSeen = true
	}
}

// openAIChunk handles one chat.completion.chunk SSE data payload.
func openAIChunk(data []byte, r *turnResult) (piece string, done bool, err error) {
	if bytes.Equal(data, []byte("[DONE]")) {
		return "", true, nil
	}
	ch := gjson.ParseBytes(data)
	if e := ch.Get("error"); e.Exists() {
		return "", false, fmt.Errorf("stream error: %s", e.Get("message").String())
	}
	if u := ch.Get("usage"); u.Exists() && u.Type == gjson.JSON {
		r.PromptTokens = int(u.Get("prompt_tokens").Int())
		r.CachedTokens = int(u.Get("prompt_tokens_details.cached_tokens").Int())
		r.OutputTokens = int(u.Get("completion_tokens").Int())
		r.UsageSeen = true
	}
	return ch.Get("choices.0.delta.content").String(), false, nil
}

// newUUID returns a random RFC 4122 version-4 UUID, like Claude Code's
// session ids.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newDeviceID returns a random 64-hex device id (Claude Code's userID).
func newDeviceID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// billingLine is Claude Code's per-conversation billing line (docs/clients.md): its 3-hex suffix differs between conversations and stays the same
// across a conversation's turns.
func billingLine(sessionID string) string {
	h := fnv.New32a()
	h.Write([]byte(sessionID))
	return fmt.Sprintf("x-anthropic-billing-header: cc_version=2.1.332.%03x; cc_entrypoint=cli;", h.Sum32()%4096)
}

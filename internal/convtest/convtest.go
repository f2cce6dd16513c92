// Package convtest is a test helper: it plays a few multi-turn
// conversations that share a system prompt against a warden (round by
// round, one turn at a time, so that what the engines evict is decided by
// their cache sizes alone), and joins each turn with its decision-log line.
// The ledger's tests use it on the simulator and on real vLLM alike.
package convtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/router/decision"
)

// Plan is what to play.
type Plan struct {
	URL           string // the warden's base URL
	Model         string
	Conversations int
	Turns         int
	SystemWords   int // words of the shared system prompt
	FirstWords    int // words of each conversation's first message
	TurnWords     int // words of each follow-up message
	MaxTokens     int
	// Routers, when set, are several wardens in front of the same
	// engines, the clients alternating between them: conversation c's
	// turn n goes to Routers[(c+n) % len(Routers)] (URL is not used).
	Routers []string
	// BeforeRound, when set, runs before each round of turns after the
	// first (turn is the round about to be played): a restart, say.
	BeforeRound func(turn int) error
}

// Turn is one played turn, with its decision-log line once joined.
type Turn struct {
	Conversation, Turn int
	RequestID          string
	Replica            string // X-Warden-Replica of the answer
	Via                string // the warden's URL it was sent to
	Prompt, Cached     int    // the engine's usage
	Line               *decision.Line
}

// Play runs the plan and returns every turn in the order played.
func Play(ctx context.Context, p Plan) ([]Turn, error) {
	hc := &http.Client{Timeout: 5 * time.Minute}
	system := words("system", 0, p.SystemWords)
	history := make([][]map[string]string, p.Conversations)
	var out []Turn
	for turn := 1; turn <= p.Turns; turn++ {
		if turn > 1 && p.BeforeRound != nil {
			if err := p.BeforeRound(turn); err != nil {
				return out, err
			}
		}
		for c := range p.Conversations {
			n := p.TurnWords
			if turn == 1 {
				n = p.FirstWords
				history[c] = []map[string]string{{"role": "system", "content": system}}
			}
			history[c] = append(history[c], map[string]string{"role": "user", "content": words("c"+strconv.Itoa(c), turn, n)})
			t, answer, err := send(ctx, hc, p, c, turn, history[c])
			if err != nil {
				return out, err
			}
			history[c] = append(history[c], map[string]string{"role": "assistant", "content": answer})
			out = append(out, t)
		}
	}
	return out, nil
}

func send(ctx context.Context, hc *http.Client, p Plan, c, turn int, msgs []map[string]string) (Turn, string, error) {
	t := Turn{Conversation: c, Turn: turn, RequestID: fmt.Sprintf("conv%d-turn%d", c, turn), Via: p.URL}
	if len(p.Routers) > 0 {
		t.Via = p.Routers[(c+turn)%len(p.Routers)]
	}
	body, _ := json.Marshal(map[string]any{"model": p.Model, "messages": msgs, "max_tokens": p.MaxTokens, "temperature": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.Via+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return t, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("session_id", fmt.Sprintf("convtest-%d", c))
	req.Header.Set(decision.RequestIDHeader, t.RequestID)
	resp, err := hc.Do(req)
	if err != nil {
		return t, "", fmt.Errorf("%s: %w", t.RequestID, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return t, "", fmt.Errorf("%s: %s: %s", t.RequestID, resp.Status, raw)
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			Prompt  int `json:"prompt_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) == 0 {
		return t, "", fmt.Errorf("%s: answer %q: %v", t.RequestID, raw, err)
	}
	t.Replica = resp.Header.Get("X-Warden-Replica")
	t.Prompt, t.Cached = r.Usage.Prompt, r.Usage.Details.Cached
	return t, r.Choices[0].Message.Content, nil
}

// words is n deterministic words of one speaker's turn.
func words(who string, turn, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s%d%c", who, turn, 'a'+rune((i*7+turn)%26))
		if i%9 == 8 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// Join attaches each turn's decision-log line (read from path until every
// turn has one or wait passes).
func Join(turns []Turn, path string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		lines, err := decision.ReadFiles(path)
		byID := map[string]decision.Line{}
		for _, l := range lines {
			byID[l.RequestID] = l
		}
		missing := 0
		for i := range turns {
			if l, ok := byID[turns[i].RequestID]; ok {
				turns[i].Line = &l
			} else {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d turns have no decision-log line in %s (last read: %v)", missing, len(turns), path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Accuracy is how well placement predicted the engines' cached tokens on
// follow-up turns: the share whose prediction was within tolerance tokens
// of what the engine reported, and the evictions and reasons seen.
type Accuracy struct {
	FollowUps, Within int
	Reasons           map[string]int // follow-up turns by miss_reason
}

// Measure computes the accuracy over the joined turns.
func Measure(turns []Turn, tolerance int) Accuracy {
	a := Accuracy{Reasons: map[string]int{}}
	for _, t := range turns {
		if t.Turn == 1 || t.Line == nil {
			continue
		}
		a.FollowUps++
		d := t.Line.Predicted - int(t.Line.Cached)
		if d <= tolerance && d >= -tolerance {
			a.Within++
		}
		a.Reasons[t.Line.MissReason]++
	}
	return a
}

// String is one line for a test log.
func (a Accuracy) String() string {
	return fmt.Sprintf("%d of %d follow-up turns predicted within tolerance (%.0f%%); miss reasons %v",
		a.Within, a.FollowUps, 100*float64(a.Within)/float64(max(a.FollowUps, 1)), a.Reasons)
}

// evictedMiss is a warden_prefix_miss_tokens_total series with the
// evicted reason and a value above zero.
var evictedMiss = regexp.MustCompile(`(?m)^warden_prefix_miss_tokens_total\{[^}]*reason="evicted"[^}]*\} [1-9]`)

// Check is issue 42's bar over turns played and joined against the warden
// at url: every follow-up turn logged, at least 90 % of them predicted
// within tolerance tokens of the engine's cached tokens, some misses
// labelled evicted, and warden_prefix_miss_tokens_total with that reason
// in /metrics. It logs every turn.
func Check(t testing.TB, url string, turns []Turn, followUps, tolerance int) {
	t.Helper()
	acc := Measure(turns, tolerance)
	t.Log(acc)
	for _, tr := range turns {
		if l := tr.Line; l != nil {
			t.Logf("conv %d turn %d replica %s: prompt %d cached %d predicted %d (%s) miss %q route %s",
				tr.Conversation, tr.Turn, tr.Replica, tr.Prompt, tr.Cached, l.Predicted, l.PredFrom, l.MissReason, l.Route)
		}
	}
	if acc.FollowUps != followUps || acc.Within*10 < acc.FollowUps*9 {
		t.Errorf("%v: want at least 90 %% of the %d follow-ups within %d tokens", acc, followUps, tolerance)
	}
	if acc.Reasons["evicted"] == 0 {
		t.Errorf("no follow-up turn's miss was labelled evicted: %v", acc.Reasons)
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !evictedMiss.Match(text) {
		t.Errorf("/metrics has no warden_prefix_miss_tokens_total above 0 with reason=\"evicted\"")
	}
}

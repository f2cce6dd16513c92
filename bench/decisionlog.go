package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/internal/report"
	"github.com/lmwarden/warden/router/decision"
)

// Joining the warden's decision log (warden serve/route --decision-log)
// with the per-turn table: every turn sends X-Request-Id, which the warden
// records; `warden bench --decision-log FILE` reads the log back after the
// run and writes turns-decisions.csv, one row per row of turns.csv in the
// same order, with the warden's side of each turn.

// RequestIDHeader carries each turn's request id (requestID).
const RequestIDHeader = decision.RequestIDHeader

// FileTurnDecisions is the joined table's name in the results folder.
const FileTurnDecisions = "turns-decisions.csv"

// requestID names one turn: the session id, the subagent's id for a
// subagent's turn, and the turn number (as turns.csv's session_id,
// agent_id and turn), so a row of turns.csv finds its log line.
func requestID(sessionID, agentID string, turn int) string {
	if agentID != "" {
		return sessionID + "-" + agentID + "-" + strconv.Itoa(turn)
	}
	return sessionID + "-" + strconv.Itoa(turn)
}

// RequestID is the request id turn t was sent with.
func (t TurnRecord) RequestID() string { return requestID(t.SessionID, t.AgentID, t.Turn) }

// decisionFiles lists the log and its rotated files (lumberjack's
// name-<time>.ext next to it), oldest first, the current file last.
func decisionFiles(path string) ([]string, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	ext := filepath.Ext(path)
	old, _ := filepath.Glob(strings.TrimSuffix(path, ext) + "-*" + ext)
	slices.Sort(old) // the time in the name sorts
	return append(old, path), nil
}

// readDecisions returns the log lines of the wanted request ids (a later
// line of one id wins).
func readDecisions(path string, want map[string]bool) (map[string]decision.Line, error) {
	files, err := decisionFiles(path)
	if err != nil {
		return nil, err
	}
	got := map[string]decision.Line{}
	for _, name := range files {
		if err := readDecisionFile(name, want, got); err != nil {
			return nil, err
		}
	}
	return got, nil
}

func readDecisionFile(name string, want map[string]bool, got map[string]decision.Line) error {
	f, err := os.Open(name)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // rotated away meanwhile
		}
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		id := gjson.GetBytes(line, "request_id").String()
		if !want[id] {
			continue // another client's, or another run's
		}
		var d decision.Line
		if err := json.Unmarshal(line, &d); err != nil {
			continue // a line cut by a crash
		}
		got[id] = d
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// JoinDecisions reads the decision log at path and writes
// turns-decisions.csv into dir for the run's turns. The warden writes its
// lines a moment after a turn's answer, so while turns that were answered
// lack their line it reads again, for up to wait. It reports how many
// turns found their line.
func JoinDecisions(dir, path string, res *Results, wait time.Duration) (matched int, err error) {
	want := map[string]bool{}
	for _, t := range res.Turns {
		want[t.RequestID()] = true
	}
	deadline := time.Now().Add(wait)
	var got map[string]decision.Line
	for {
		if got, err = readDecisions(path, want); err != nil {
			return 0, fmt.Errorf("--decision-log: %w", err)
		}
		missing := false
		for _, t := range res.Turns {
			if _, ok := got[t.RequestID()]; !ok && t.Error == "" {
				missing = true
				break
			}
		}
		if !missing || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	f, err := os.Create(filepath.Join(dir, FileTurnDecisions))
	if err != nil {
		return 0, err
	}
	matched, err = writeTurnDecisions(f, res, got)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return matched, err
}

// fsec formats seconds to the microsecond (scaling leaves float noise).
func fsec(s float64) string { return report.Float(math.Round(s*1e6) / 1e6) }

// writeTurnDecisions writes one row per turn, in turns.csv's order. The
// warden's times are converted to simulated seconds (x --time-scale), as
// every time in turns.csv; logged is false when the turn has no line (it
// never reached the warden, or the log dropped it).
func writeTurnDecisions(w io.Writer, res *Results, got map[string]decision.Line) (int, error) {
	scale := res.Config.TimeScale
	if scale <= 0 {
		scale = 1
	}
	tab := report.Table{Header: []string{"variant", "sessions", "session", "session_id", "turn", "subagent", "agent_id", "request_id",
		"logged", "policy", "route", "replica", "queue_wait_s", "warden_ttfb_s", "warden_duration_s", "status", "session_source",
		"predicted_cached_tokens", "predicted_from", "miss_reason"}}
	matched := 0
	for _, t := range res.Turns {
		id := t.RequestID()
		row := []string{t.Variant, strconv.Itoa(t.Sessions), strconv.Itoa(t.Session), t.SessionID, strconv.Itoa(t.Turn),
			strconv.FormatBool(t.Subagent), t.AgentID, id}
		d, ok := got[id]
		if !ok {
			row = append(row, "false", "", "", "", "", "", "", "", "", "", "", "")
		} else {
			matched++
			ttfb := -1.0
			if d.TTFTS >= 0 {
				ttfb = d.TTFTS * scale
			}
			row = append(row, "true", d.Policy, d.Route, strconv.Itoa(d.Replica), fsec(d.WaitS*scale), fsec(ttfb),
				fsec(d.DurationS*scale), strconv.Itoa(d.Status), d.Source, strconv.Itoa(d.Predicted), d.PredFrom, d.MissReason)
		}
		tab.Rows = append(tab.Rows, row)
	}
	return matched, tab.WriteCSV(w)
}

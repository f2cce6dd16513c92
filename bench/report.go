package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jedib0t/go-pretty/v6/table"
)

// Output file names inside the results folder.
const (
	FileTable   = "table.md"
	FileSummary = "summary.csv"
	FileJSON    = "summary.json"
	FileTurns   = "turns.csv"
	FileChart   = "ttfb.svg"
)

// WriteAll writes every output file into dir (created if missing).
func WriteAll(dir string, res *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := []struct {
		name  string
		write func(io.Writer, *Results) error
	}{
		{FileTable, func(w io.Writer, r *Results) error { _, err := io.WriteString(w, Markdown(r)); return err }},
		{FileSummary, WriteSummaryCSV},
		{FileJSON, WriteJSON},
		{FileTurns, WriteTurnsCSV},
		{FileChart, WriteSVG},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), res, f.write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, res *Results, write func(io.Writer, *Results) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f, res); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// row pairs a stage's A and B summaries (B is nil without A/B).
type row struct {
	sessions int
	a, b     *StageSummary
}

// rows groups the summaries by stage concurrency, in the configured stage order.
func rows(res *Results) []row {
	var out []row
	find := func(n int, v string) *StageSummary {
		for i := range res.Stages {
			if s := &res.Stages[i]; s.Sessions == n && s.Variant == v {
				return s
			}
		}
		return nil
	}
	for _, n := range res.Config.Stages {
		if len(res.Variants) == 2 {
			out = append(out, row{n, find(n, res.Variants[0]), find(n, res.Variants[1])})
		} else {
			out = append(out, row{n, find(n, ""), nil})
		}
	}
	return out
}

// markdownCols are the reference table's value columns after "sessions".
var markdownCols = []struct {
	title    string
	field    func(*StageSummary) *float64
	decimals int
}{
	{"sessions/h", func(s *StageSummary) *float64 { return &s.SessionsPerHour }, 0},
	{"output tok/min", func(s *StageSummary) *float64 { return &s.OutputPerMin }, 0},
	{"TTFB p50 s", func(s *StageSummary) *float64 { return s.TTFBP50 }, 2},
	{"TTFB p95 s", func(s *StageSummary) *float64 { return s.TTFBP95 }, 2},
	{"replicas busy", func(s *StageSummary) *float64 { return s.ReplicasBusy }, 2},
	{"prefix hit %", func(s *StageSummary) *float64 { return s.PrefixHitPct }, 1},
}

// hostHitCol is shown when an engine has a host KV tier.
var hostHitCol = struct {
	title    string
	field    func(*StageSummary) *float64
	decimals int
}{"host hit %", func(s *StageSummary) *float64 { return s.HostHitPct }, 1}

// Markdown renders the reference table (docs/reference-rig.md's columns). With A/B each
// cell reads "A→B"; "stayed on replica %" shows B (the affinity variant), as
// the reference does. Unknown values print as "–".
func Markdown(res *Results) string {
	ab := len(res.Variants) == 2
	header := table.Row{"sessions"}
	cols := markdownCols
	for _, s := range res.Stages {
		if s.HostHitPct != nil { // an engine with a host KV tier: its hits apart
			cols = append(cols[:len(cols):len(cols)], hostHitCol)
			break
		}
	}
	for _, c := range cols {
		if ab {
			header = append(header, c.title+" "+res.Variants[0]+"→"+res.Variants[1])
		} else {
			header = append(header, c.title)
		}
	}
	t := table.NewWriter()
	t.AppendHeader(append(header, "stayed on replica %"))
	for _, r := range rows(res) {
		line := table.Row{r.sessions}
		for _, c := range cols {
			cell := num(r.a, c.field, c.decimals)
			if ab {
				cell += "→" + num(r.b, c.field, c.decimals)
			}
			line = append(line, cell)
		}
		stayed := r.a
		if ab {
			stayed = r.b
		}
		t.AppendRow(append(line, num(stayed, func(s *StageSummary) *float64 { return s.StayedPct }, 1)))
	}
	return t.RenderMarkdown() + "\n"
}

// num formats one field of s with the given decimals; "–" when s or the
// field is missing.
func num(s *StageSummary, field func(*StageSummary) *float64, decimals int) string {
	if s == nil {
		return "–"
	}
	v := field(s)
	if v == nil {
		return "–"
	}
	return strconv.FormatFloat(*v, 'f', decimals, 64)
}

func optCSV(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'f', -1, 64)
}

func fcsv(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// WriteSummaryCSV writes one line per stage run (empty cells = unknown).
func WriteSummaryCSV(w io.Writer, res *Results) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"variant", "sessions", "seconds", "turns", "sessions_finished", "sessions_started",
		"errors", "late_turns", "sessions_per_hour", "output_tokens_per_min", "ttfb_p50_s", "ttfb_p95_s",
		"replicas_busy", "prefix_hit_pct", "stayed_pct", "output_tokens", "prompt_tokens", "cached_tokens",
		"prefix_hits", "prefix_queries", "busy_polls", "mean_prompt_first", "running_mean", "waiting_mean", "preemptions",
		"subagent_turns", "subagent_stayed_pct", "host_hit_pct"})
	for _, s := range res.Stages {
		_ = cw.Write([]string{s.Variant, strconv.Itoa(s.Sessions), fcsv(s.Seconds), strconv.Itoa(s.Turns),
			strconv.Itoa(s.SessionsFinished), strconv.Itoa(s.SessionsStarted), strconv.Itoa(s.Errors),
			strconv.Itoa(s.Late), fcsv(s.SessionsPerHour), fcsv(s.OutputPerMin), optCSV(s.TTFBP50),
			optCSV(s.TTFBP95), optCSV(s.ReplicasBusy), optCSV(s.PrefixHitPct), optCSV(s.StayedPct),
			strconv.Itoa(s.OutputTokens), strconv.Itoa(s.PromptTokens), strconv.Itoa(s.CachedTokens),
			fcsv(s.PrefixHits), fcsv(s.PrefixQueries), strconv.Itoa(s.BusyPolls), optCSV(s.MeanPromptFirst),
			optCSV(s.RunningMean), optCSV(s.WaitingMean), optCSV(s.Preemptions),
			strconv.Itoa(s.SubagentTurns), optCSV(s.SubagentStayedPct), optCSV(s.HostHitPct)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteTurnsCSV writes every turn sample.
func WriteTurnsCSV(w io.Writer, res *Results) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"variant", "sessions", "session", "session_id", "turn", "start_s", "ttfb_s",
		"duration_s", "prompt_tokens", "cached_tokens", "output_tokens", "replica", "stayed", "in_stage",
		"last_turn", "error", "subagent", "agent_id"})
	for _, t := range res.Turns {
		stayed := ""
		if t.Stayed != nil {
			stayed = strconv.FormatBool(*t.Stayed)
		}
		_ = cw.Write([]string{t.Variant, strconv.Itoa(t.Sessions), strconv.Itoa(t.Session), t.SessionID,
			strconv.Itoa(t.Turn), fcsv(t.StartS), fcsv(t.TTFBS), fcsv(t.DurationS), strconv.Itoa(t.PromptTokens),
			strconv.Itoa(t.CachedTokens), strconv.Itoa(t.OutputTokens), t.Replica, stayed,
			strconv.FormatBool(t.InStage), strconv.FormatBool(t.LastTurn), t.Error,
			strconv.FormatBool(t.Subagent), t.AgentID})
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the run's settings and every stage summary.
func WriteJSON(w io.Writer, res *Results) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

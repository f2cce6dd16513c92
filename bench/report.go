package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/internal/report"
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
	with := func(write func(io.Writer, *Results) error) func(io.Writer) error {
		return func(w io.Writer) error { return write(w, res) }
	}
	return report.WriteFiles(dir,
		report.Text(FileTable, Markdown(res)),
		report.File{Name: FileSummary, Write: with(WriteSummaryCSV)},
		report.File{Name: FileJSON, Write: with(WriteJSON)},
		report.File{Name: FileTurns, Write: with(WriteTurnsCSV)},
		report.File{Name: FileChart, Write: with(WriteSVG)})
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

// column is one value column of the table: its title, its field and its
// decimals; cell, when set, may replace the number with words (a value that
// would mislead).
type column struct {
	title    string
	field    func(*StageSummary) *float64
	decimals int
	cell     func(*StageSummary) string // "" = the number
}

// markdownCols are the reference table's value columns after "sessions".
var markdownCols = []column{
	{"sessions/h", func(s *StageSummary) *float64 { return &s.SessionsPerHour }, 0, sessionsPerHourCell},
	{"output tok/min", func(s *StageSummary) *float64 { return &s.OutputPerMin }, 0, nil},
	{"TTFB p50 s", func(s *StageSummary) *float64 { return s.TTFBP50 }, 2, nil},
	{"TTFB p95 s", func(s *StageSummary) *float64 { return s.TTFBP95 }, 2, nil},
	{"replicas busy", func(s *StageSummary) *float64 { return s.ReplicasBusy }, 2, nil},
	{"prefix hit %", func(s *StageSummary) *float64 { return s.PrefixHitPct }, 1, nil},
}

// hostHitCol is shown when an engine has a host KV tier.
var hostHitCol = column{"host hit %", func(s *StageSummary) *float64 { return s.HostHitPct }, 1, nil}

// The columns after the reference's: the share of follow-ups that stayed on
// their session's first replica, and the bench's own lag (lag.go).
var (
	stayedCol = column{"stayed on replica %", func(s *StageSummary) *float64 { return s.StayedPct }, 1, nil}
	lagCol    = column{"bench lag p99 s", func(s *StageSummary) *float64 { return s.BenchLagP99 }, 3, nil}
)

// NotASession is the sessions/h cell of a stage in which turns finished but
// no session did: the stage was shorter than a session at that load, so the
// rate is not known, not zero.
const NotASession = "n/a (stage < a session)"

func sessionsPerHourCell(s *StageSummary) string {
	if s.SessionsFinished == 0 && s.Turns > 0 {
		return NotASession
	}
	return ""
}

// Markdown renders the reference table (docs/reference-rig.md's columns),
// then the stayed share and the bench's own lag, then a note for each stage
// whose TTFB tail is within that lag. With A/B each cell reads "A→B" (the
// stayed share too: under `off` it is the chance of landing on the same
// replica). Unknown values print as "–".
func Markdown(res *Results) string {
	ab := len(res.Variants) == 2
	t := report.Table{Header: []string{"sessions"}, Right: []bool{true}} // sessions: a number
	cols := markdownCols
	for _, s := range res.Stages {
		if s.HostHitPct != nil { // an engine with a host KV tier: its hits apart
			cols = append(cols[:len(cols):len(cols)], hostHitCol)
			break
		}
	}
	cols = append(cols[:len(cols):len(cols)], stayedCol, lagCol)
	for _, c := range cols {
		if ab {
			t.Header = append(t.Header, c.title+" "+res.Variants[0]+"→"+res.Variants[1])
		} else {
			t.Header = append(t.Header, c.title)
		}
	}
	for _, r := range rows(res) {
		line := []string{strconv.Itoa(r.sessions)}
		for _, c := range cols {
			cell := c.format(r.a)
			if b := c.format(r.b); ab && (b != cell || cell != NotASession) { // words said once
				cell += "→" + b
			}
			line = append(line, cell)
		}
		t.Rows = append(t.Rows, line)
	}
	out := t.Markdown()
	if n := len(res.Config.Engines); n > 0 {
		out += fmt.Sprintf("\n> prefix hits and replicas busy: the /metrics of the %d engines given with --engines, summed, not the target's\n", n)
	}
	if notes := lagNotes(res); len(notes) > 0 {
		out += "\n> " + strings.Join(notes, "\n>\n> ") + "\n"
	}
	return out
}

// format is the column's cell for s (report.Missing when s is nil).
func (c column) format(s *StageSummary) string {
	if s != nil && c.cell != nil {
		if words := c.cell(s); words != "" {
			return words
		}
	}
	return num(s, c.field, c.decimals)
}

// lagNotes names every stage whose TTFB tail is within the bench's own lag.
func lagNotes(res *Results) []string {
	var out []string
	for _, s := range res.Stages {
		if s.LagWarning == "" {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s (TTFB p95 %.3f s, bench lag p99 %.3f s)",
			stageName(s), s.LagWarning, *s.TTFBP95, *s.BenchLagP99))
	}
	return out
}

// stageName is "16 sessions" or "16 sessions [sticky]".
func stageName(s StageSummary) string {
	name := fmt.Sprintf("%d sessions", s.Sessions)
	if s.Sessions == 1 {
		name = "1 session"
	}
	if s.Variant != "" {
		name += " [" + s.Variant + "]"
	}
	return name
}

// num formats one field of s with the given decimals; report.Missing when
// s or the field is missing.
func num(s *StageSummary, field func(*StageSummary) *float64, decimals int) string {
	if s == nil {
		return report.Missing
	}
	return report.Num(field(s), decimals)
}

// WriteSummaryCSV writes one line per stage run (empty cells = unknown).
func WriteSummaryCSV(w io.Writer, res *Results) error {
	t := report.Table{Header: []string{"variant", "sessions", "seconds", "turns", "sessions_finished", "sessions_started",
		"errors", "late_turns", "sessions_per_hour", "output_tokens_per_min", "ttfb_p50_s", "ttfb_p95_s",
		"replicas_busy", "prefix_hit_pct", "stayed_pct", "output_tokens", "prompt_tokens", "cached_tokens",
		"prefix_hits", "prefix_queries", "busy_polls", "mean_prompt_first", "running_mean", "waiting_mean", "preemptions",
		"subagent_turns", "subagent_stayed_pct", "host_hit_pct", "bench_lag_p50_s", "bench_lag_p99_s", "bench_lag_max_s", "lag_warning"}}
	for _, s := range res.Stages {
		t.Rows = append(t.Rows, []string{s.Variant, strconv.Itoa(s.Sessions), report.Float(s.Seconds), strconv.Itoa(s.Turns),
			strconv.Itoa(s.SessionsFinished), strconv.Itoa(s.SessionsStarted), strconv.Itoa(s.Errors),
			strconv.Itoa(s.Late), report.Float(s.SessionsPerHour), report.Float(s.OutputPerMin), report.OptFloat(s.TTFBP50),
			report.OptFloat(s.TTFBP95), report.OptFloat(s.ReplicasBusy), report.OptFloat(s.PrefixHitPct), report.OptFloat(s.StayedPct),
			strconv.Itoa(s.OutputTokens), strconv.Itoa(s.PromptTokens), strconv.Itoa(s.CachedTokens),
			report.Float(s.PrefixHits), report.Float(s.PrefixQueries), strconv.Itoa(s.BusyPolls), report.OptFloat(s.MeanPromptFirst),
			report.OptFloat(s.RunningMean), report.OptFloat(s.WaitingMean), report.OptFloat(s.Preemptions),
			strconv.Itoa(s.SubagentTurns), report.OptFloat(s.SubagentStayedPct), report.OptFloat(s.HostHitPct),
			report.OptFloat(s.BenchLagP50), report.OptFloat(s.BenchLagP99), report.OptFloat(s.BenchLagMax), s.LagWarning})
	}
	return t.WriteCSV(w)
}

// WriteTurnsCSV writes every turn sample.
func WriteTurnsCSV(w io.Writer, res *Results) error {
	tab := report.Table{Header: []string{"variant", "sessions", "session", "session_id", "turn", "start_s", "ttfb_s",
		"duration_s", "prompt_tokens", "cached_tokens", "output_tokens", "replica", "stayed", "in_stage",
		"last_turn", "error", "subagent", "agent_id"}}
	for _, t := range res.Turns {
		stayed := ""
		if t.Stayed != nil {
			stayed = strconv.FormatBool(*t.Stayed)
		}
		tab.Rows = append(tab.Rows, []string{t.Variant, strconv.Itoa(t.Sessions), strconv.Itoa(t.Session), t.SessionID,
			strconv.Itoa(t.Turn), report.Float(t.StartS), report.Float(t.TTFBS), report.Float(t.DurationS), strconv.Itoa(t.PromptTokens),
			strconv.Itoa(t.CachedTokens), strconv.Itoa(t.OutputTokens), t.Replica, stayed,
			strconv.FormatBool(t.InStage), strconv.FormatBool(t.LastTurn), t.Error,
			strconv.FormatBool(t.Subagent), t.AgentID})
	}
	return tab.WriteCSV(w)
}

// WriteJSON writes the run's settings and every stage summary.
func WriteJSON(w io.Writer, res *Results) error { return report.WriteJSON(w, res) }

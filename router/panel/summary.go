package panel

import (
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/jedib0t/go-pretty/v6/text"
)

// summaryColumns are the exit summary's headers.
var summaryColumns = table.Row{
	"replica", "requests", "sticky", "spills", "pinned", "prompt tok", "cached tok", "hit",
	"cached share", "new turns",
}

// WriteSummary writes the exit summary: per replica and in total the
// requests, sticky % (sticky turns / turns of known sessions served there,
// i.e. requests less first turns, client-pinned ones and those a
// non-affinity policy placed; in total Status.StickyShare), spills
// (requests spilled onto it), client-pinned requests, the engines' prompt
// and cached tokens with their hit % (prefix-cache counters since warden
// start), the cached share from the usage reports, and the turns placed
// there as new (a conversation's first, or one without a session id; the
// distinct sessions seen are on the head line, never in that column); then
// uptime and, if the run was ever overcommitted
// (Status.PeakOvercommit, or Overcommit now), what happened and what to do.
func WriteSummary(w io.Writer, s schema.Status) {
	head := "warden summary"
	if s.Model != "" {
		head += " for " + s.Model
	}
	fmt.Fprintf(w, "%s: policy %s, up %s, %s seen\n", head, s.Policy, fmtDuration(uptime(s)),
		count(int(s.SessionsSeen), "session"))
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(panelTableStyle())
	t.AppendHeader(summaryColumns)
	var all schema.Replica
	for _, r := range s.Replicas {
		t.AppendRow(summaryRow(strconv.Itoa(r.Rank), r, stickyShare(r), r.New))
		addReplica(&all, r)
	}
	// The whole run's sticky share is the placer's own count (Status.
	// StickyShare), the figure the panel's badge shows: one number.
	t.AppendFooter(summaryRow("all", all, s.StickyShare, all.New))
	var cc []table.ColumnConfig
	for i := range summaryColumns {
		cc = append(cc, table.ColumnConfig{Number: i + 1, Align: text.AlignRight, AlignHeader: text.AlignRight, AlignFooter: text.AlignRight})
	}
	t.SetColumnConfigs(cc)
	t.SuppressTrailingSpaces()
	t.Render()
	fmt.Fprintln(w, "sticky: turns of known sessions (not a first turn, not client-pinned, placed by an affinity policy)")
	fmt.Fprintln(w, "that stayed on their session's replica; the all row is the whole run's, as the panel's badge.")
	fmt.Fprintln(w, "new turns: turns placed as new, each a conversation's first or a request without a session id")
	fmt.Fprintln(w, "(a count of placements: the sessions seen are the head line's).")
	fmt.Fprintln(w, "prompt tok, cached tok and hit: the engines' prefix-cache counters since warden start;")
	fmt.Fprintf(w, "cached share: usage reports of finished requests (%s of %s prompt tokens cached).\n",
		fmtTokens(float64(all.CachedTokens)), fmtTokens(float64(all.PromptTokens)))
	if s.HasOffload() {
		writeOffloadSummary(w, s)
	}
	if line := MissLine(s.MissTokens); line != "" {
		fmt.Fprintln(w, "uncached prompt tokens by cause: "+line)
	}
	if p := s.PeakOvercommit; p != nil {
		writeWrapped(w, peakMessage(*p, "KV cache was overcommitted during the run (worst at "+
			p.At.Local().Format("15:04:05")+")"), 100)
	} else if msg, over := Overcommit(s); over {
		writeWrapped(w, msg, 100)
	}
}

// offloadSummaryColumns are the headers of the exit summary's host KV tier
// table (only when a replica has one).
var offloadSummaryColumns = table.Row{"replica", "host tier", "filled", "looked up", "found", "host hit", "loaded", "stored"}

// writeOffloadSummary writes, per replica and in total, the host KV tier's
// size, the prompt tokens that missed the GPU cache and were looked up in
// it, those found there, their share, and the bytes loaded back from it
// and stored to it; then offloadLine.
func writeOffloadSummary(w io.Writer, s schema.Status) {
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(panelTableStyle())
	t.AppendHeader(offloadSummaryColumns)
	var all schema.Replica
	for _, r := range s.Replicas {
		t.AppendRow(offloadSummaryRow(strconv.Itoa(r.Rank), r))
		all.OffloadBytes += r.OffloadBytes
		all.OffloadQueries += r.OffloadQueries
		all.OffloadHits += r.OffloadHits
		all.OffloadLoadedBytes += r.OffloadLoadedBytes
		all.OffloadStoredBytes += r.OffloadStoredBytes
		if all.OffloadBackend == "" {
			all.OffloadBackend = r.OffloadBackend
		}
	}
	all.OffloadHitRate = ratio(all.OffloadHits, all.OffloadQueries)
	all.OffloadFilled = filledOf(s.Replicas)
	t.AppendFooter(offloadSummaryRow("all", all))
	var cc []table.ColumnConfig
	for i := range offloadSummaryColumns {
		cc = append(cc, table.ColumnConfig{Number: i + 1, Align: text.AlignRight, AlignHeader: text.AlignRight, AlignFooter: text.AlignRight})
	}
	t.SetColumnConfigs(cc)
	t.SuppressTrailingSpaces()
	t.Render()
	writeWrapped(w, offloadLine(s)+". The usage reports' cached tokens include the host tier's hits; "+
		"hit and cached tok above count the GPU prefix cache only. filled: bytes stored since the engine "+
		"started over the tier's size; vLLM reports neither how full the tier is nor what it evicted, but it "+
		"evicts only for room, so this holds until the tier is full.", 100)
}

// offloadSummaryRow is one row of the host KV tier table.
func offloadSummaryRow(name string, r schema.Replica) table.Row {
	hit := "-"
	if r.HasOffload() || r.OffloadQueries > 0 {
		hit = fmtPct(ratio(r.OffloadHits, r.OffloadQueries))
	}
	return table.Row{name, fmtOffloadSize(r), fmtFilled(r), fmtTokens(r.OffloadQueries), fmtTokens(r.OffloadHits), hit,
		fmtBytes(r.OffloadLoadedBytes), fmtBytes(r.OffloadStoredBytes)}
}

// filledOf is the fill of the replicas' tiers whose fill is known,
// weighted by their size; -1 when none is known.
func filledOf(reps []schema.Replica) float64 {
	var filled, size float64
	for _, r := range reps {
		if r.HasOffload() && r.OffloadFilled >= 0 && r.OffloadBytes > 0 {
			filled += r.OffloadFilled * float64(r.OffloadBytes)
			size += float64(r.OffloadBytes)
		}
	}
	if size == 0 {
		return -1
	}
	return filled / size
}

// fmtFilled is a tier's estimated fill: "63%", "full", "-" when not known.
func fmtFilled(r schema.Replica) string {
	switch {
	case !r.HasOffload() || r.OffloadFilled < 0 || (r.OffloadFilled == 0 && r.OffloadBytes == 0):
		return "-"
	case r.OffloadFilled >= 1:
		return "full"
	}
	return fmtPct(r.OffloadFilled)
}

// writeWrapped writes msg word-wrapped to lines of at most width runes
// (a longer single word gets a line of its own).
func writeWrapped(w io.Writer, msg string, width int) {
	line := ""
	for _, word := range strings.Fields(msg) {
		if line != "" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width {
			fmt.Fprintln(w, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		fmt.Fprintln(w, line)
	}
}

// summaryRow is one summary row, in summaryColumns order.
func summaryRow(name string, r schema.Replica, sticky float64, sessions uint64) table.Row {
	return table.Row{
		name, r.Requests, fmtPct(sticky), r.SpilledIn, r.Pinned,
		fmtTokens(r.PrefixQueries), fmtTokens(r.PrefixHits), fmtPct(ratio(r.PrefixHits, r.PrefixQueries)),
		fmtPct(ratio(float64(r.CachedTokens), float64(r.PromptTokens))), sessions,
	}
}

// stickyShare is the share of a replica's turns of known sessions (its
// requests less first turns, client-pinned ones and those a non-affinity
// policy placed, as the placer counts Status.StickyShare) that were sticky.
func stickyShare(r schema.Replica) float64 {
	known := float64(r.Requests) - float64(r.New) - float64(r.Pinned) - float64(r.Balanced)
	if known <= 0 {
		return 0
	}
	return min(1, float64(r.Sticky)/known)
}

// addReplica adds the summed counters of r into all.
func addReplica(all *schema.Replica, r schema.Replica) {
	all.Requests += r.Requests
	all.New += r.New
	all.Sticky += r.Sticky
	all.SpilledIn += r.SpilledIn
	all.Pinned += r.Pinned
	all.PrefixQueries += r.PrefixQueries
	all.PrefixHits += r.PrefixHits
	all.PromptTokens += r.PromptTokens
	all.CachedTokens += r.CachedTokens
}

// missOrder is the order causes are shown in (router/ledger's reasons).
var missOrder = []string{"new", "evicted", "moved", "restarted", "prefix_changed", "unknown"}

// MissLine is the uncached prompt tokens by cause on one line ("" when
// there are none): "new 12.3k (80.1%), evicted 3.0k (19.9%)".
func MissLine(m map[string]uint64) string {
	var total uint64
	for _, v := range m {
		total += v
	}
	if total == 0 {
		return ""
	}
	var parts []string
	for _, k := range missOrder {
		if v := m[k]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", k, fmtTokens(float64(v)), fmtPct(float64(v)/float64(total))))
		}
	}
	return strings.Join(parts, ", ")
}

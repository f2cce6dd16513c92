package panel

import (
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/jedib0t/go-pretty/v6/text"
)

// tableColumns are the replica table's headers; they stay short so that the
// table fits 100 columns with eight replicas and large counters.
var tableColumns = table.Row{
	"rank", "gpu", "port", "up", "infl", "sticky", "spill", "pin",
	"run", "wait", "kv", "kv cap", "hit", "sess", "rst",
}

// tableLegend explains the short headers; each line fits 100 columns.
var tableLegend = []string{
	"infl = in flight, sticky = turns that stayed, spill = spilled in, pin = client-pinned,",
	"run/wait = engine running/waiting, kv = KV cache used, hit = prefix-cache hit rate since start,",
	"sess = active conversations (of them subagents'), rst = restarts",
}

// offloadColumns are inserted after "hit" when any replica has a host KV
// tier (Status.HasOffload): its size and its hit rate. The table then
// separates columns by one space instead of two to stay within 100
// columns.
var offloadColumns = table.Row{"host", "h.hit"}

// offloadAt is where offloadColumns go: after tableColumns' "hit".
const offloadAt = 13

// offloadLegend explains offloadColumns.
const offloadLegend = "host = host KV tier (vLLM KV offloading), h.hit = tokens found there / GPU misses looked up"

// columnsFor is the table's header row for s: "port" becomes "endpoint"
// when a replica is on another host (its cell then has the host too).
func columnsFor(s schema.Status) table.Row {
	cols := tableColumns
	if anyRemote(s.Replicas) {
		cols = append(table.Row{}, tableColumns...)
		cols[2] = "endpoint"
	}
	if !s.HasOffload() {
		return cols
	}
	return withOffload(cols, offloadColumns)
}

// anyRemote reports whether a replica's URL names a host other than the
// loopback: boxes of a farm behind `warden route` or `warden epp`.
func anyRemote(rs []schema.Replica) bool {
	for _, r := range rs {
		if remoteHost(r) != "" {
			return true
		}
	}
	return false
}

// remoteHost is the host of r's URL when it is not a loopback address;
// "" for an engine on this machine, or a URL that does not parse.
func remoteHost(r schema.Replica) string {
	u, err := url.Parse(r.URL)
	if err != nil {
		return ""
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); h == "" || h == "localhost" || (ip != nil && ip.IsLoopback()) {
		return ""
	}
	return h
}

// endpointCell is the port column's cell: the port, with the host in front
// for a replica on another host (two boxes often share a port).
func endpointCell(r schema.Replica) any {
	if h := remoteHost(r); h != "" {
		return net.JoinHostPort(h, strconv.Itoa(r.Port))
	}
	return r.Port
}

// withOffload inserts the host tier's cells into a row at offloadAt.
func withOffload(row, cells table.Row) table.Row {
	out := append(table.Row{}, row[:offloadAt]...)
	out = append(out, cells...)
	return append(out, row[offloadAt:]...)
}

// formatStatusTable writes the routing panel as plain text: a badge line,
// the replica table with a totals row, the since-when line and any
// warnings. It is what `warden status` prints; it does not end with a clear
// screen or colour codes, so it can go to a file or a pipe.
func formatStatusTable(w io.Writer, s schema.Status) {
	for _, l := range badgeLines(s) {
		fmt.Fprintln(w, l)
	}
	tier := s.HasOffload()
	t := table.NewWriter()
	t.SetOutputMirror(w)
	st := panelTableStyle()
	if tier {
		st.Box.PaddingRight = " "
	}
	t.SetStyle(st)
	cols := columnsFor(s)
	t.AppendHeader(cols)
	for _, r := range s.Replicas {
		row := replicaRow(r)
		if tier {
			row = withOffload(row, table.Row{fmtOffloadSize(r), fmtOffloadHit(r)})
		}
		t.AppendRow(row)
	}
	foot := totalsRow(s)
	if tier {
		tot := schema.TotalsOf(s.Replicas)
		foot = withOffload(foot, table.Row{fmtOffloadSize(schema.Replica{OffloadBackend: "any", OffloadBytes: tot.OffloadBytes}),
			fmtPct(tot.OffloadHitRate)})
	}
	t.AppendFooter(foot)
	t.SetColumnConfigs(columnConfigs(cols))
	t.SuppressTrailingSpaces()
	t.Render()
	fmt.Fprintln(w, sinceLine(s))
	for _, l := range tableLegend {
		fmt.Fprintln(w, l)
	}
	if tier {
		fmt.Fprintln(w, offloadLegend)
		writeWrapped(w, offloadLine(s), 100)
	}
	for _, r := range s.Replicas {
		if r.ScrapeError != "" {
			fmt.Fprintf(w, "! replica %d metrics: %s\n", r.Rank, r.ScrapeError)
		}
	}
	for _, m := range s.Warnings {
		writeWrapped(w, "! "+m, 100)
	}
	if _, over := Overcommit(s); s.PeakOvercommit != nil && !over {
		writeWrapped(w, "! "+peakLine(*s.PeakOvercommit), 100)
	}
}

// columnConfigs right-aligns the numeric columns (all but gpu and up).
func columnConfigs(cols table.Row) []table.ColumnConfig {
	var cc []table.ColumnConfig
	for i := range cols {
		if i == 1 || i == 3 {
			continue
		}
		a := text.AlignRight
		cc = append(cc, table.ColumnConfig{Number: i + 1, Align: a, AlignFooter: a, AlignHeader: a})
	}
	return cc
}

// badgeLines renders the panel's badges: what is served and how it is
// routed, then the live routing numbers.
func badgeLines(s schema.Status) []string {
	first := "warden"
	if s.Model != "" {
		first += " serving " + s.Model
	}
	first += ", " + count(len(s.Replicas), "replica")
	if s.MaxModelLen > 0 {
		first += fmt.Sprintf(", context %d tokens", s.MaxModelLen)
	}
	if s.Engines != nil {
		if s.Engines.AutoToolChoice {
			first += ", tools " + s.Engines.ToolCallParser
		} else {
			first += ", TOOLS OFF"
		}
	}
	return []string{first, badgeLine(s)}
}

// badgeLine renders the routing badges on one line.
func badgeLine(s schema.Status) string {
	parts := []string{
		"policy " + s.Policy,
		"affinity " + fmtOnOff(s.Affinity),
		"spill threshold " + fmtSpill(s),
		"sticky " + fmtPct(s.StickyShare),
		"in flight " + strconv.Itoa(s.InFlight),
		"sessions " + fmtActiveSessions(s),
	}
	if s.SubagentSessions > 0 {
		parts = append(parts, "subagents "+strconv.Itoa(s.SubagentSessions))
	}
	return strings.Join(parts, " | ")
}

// replicaRow is one table row, in tableColumns order.
func replicaRow(r schema.Replica) table.Row {
	return table.Row{
		r.Rank, fmtDevices(r), endpointCell(r), fmtUp(r), r.InFlight, r.Sticky, r.SpilledIn, r.Pinned,
		fmtNum(r.Running), fmtNum(r.Waiting), fmtPct(r.KVUsed), fmtTokens(float64(r.KVCapacityTokens)),
		fmtPct(r.HitRate), fmtSessions(r.ActiveSessions, r.ActiveSubagents), r.Restarts,
	}
}

// totalsRow sums the rows; kv is the capacity-weighted mean fill and hit
// the hit rate over all replicas' counters.
func totalsRow(s schema.Status) table.Row {
	var inflight, up, sess, sub, rst int
	var sticky, spill, pinned uint64
	var run, wait, used, q, h float64
	for _, r := range s.Replicas {
		inflight += r.InFlight
		if r.Up {
			up++
		}
		sess += r.ActiveSessions
		sub += r.ActiveSubagents
		rst += r.Restarts
		sticky += r.Sticky
		spill += r.SpilledIn
		pinned += r.Pinned
		run += r.Running
		wait += r.Waiting
		used += r.KVUsed * float64(r.KVCapacityTokens)
		q += r.PrefixQueries
		h += r.PrefixHits
	}
	capTok := totalCapacity(s)
	return table.Row{
		"all", "", "", fmt.Sprintf("%d/%d", up, len(s.Replicas)), inflight, sticky, spill, pinned,
		fmtNum(run), fmtNum(wait), fmtPct(ratio(used, float64(capTok))), fmtTokens(float64(capTok)),
		fmtPct(ratio(h, q)), fmtSessions(sess, sub), rst,
	}
}

// panelTableStyle is a light, borderless style: columns separated by two
// spaces, a rule under the header and above the totals.
func panelTableStyle() table.Style {
	st := table.StyleLight
	st.Format.Header = text.FormatDefault
	st.Format.Footer = text.FormatDefault
	st.Options.DrawBorder = false
	st.Options.SeparateColumns = false
	st.Options.SeparateRows = false
	st.Options.SeparateHeader = true
	st.Options.SeparateFooter = true
	st.Box.PaddingLeft = ""
	st.Box.PaddingRight = "  "
	return st
}

// fmtSessions is the sess cell: active conversations, and in parentheses
// how many of them are subagents' when any are.
func fmtSessions(active, subagents int) string {
	if subagents == 0 {
		return strconv.Itoa(active)
	}
	return fmt.Sprintf("%d (%d)", active, subagents)
}

// fmtActiveSessions is the sessions badge: the active sessions (the
// table's total), and how many more the warden remembers when it does.
func fmtActiveSessions(s schema.Status) string {
	n := s.ActiveSessionCount()
	if s.Sessions != n {
		return fmt.Sprintf("%d (%d remembered)", n, s.Sessions)
	}
	return strconv.Itoa(n)
}

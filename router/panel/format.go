package panel

import (
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"strconv"
	"strings"
	"time"
)

// The number formats below are shared by the terminal table, the exit
// summary and the HTML page (assets/panel.js implements the same rules, and
// the browser test checks that both agree).

// fmtPct formats a 0..1 fraction as a percentage with one decimal: "86.4%".
func fmtPct(x float64) string {
	return strconv.FormatFloat(x*100, 'f', 1, 64) + "%"
}

// fmtTokens formats a token count compactly: "950", "41.9k", "1.51M".
func fmtTokens(n float64) string {
	switch {
	case n < 999.5:
		return strconv.FormatFloat(n, 'f', 0, 64)
	case n < 999950:
		return strconv.FormatFloat(n/1e3, 'f', 1, 64) + "k"
	default:
		return strconv.FormatFloat(n/1e6, 'f', 2, 64) + "M"
	}
}

// fmtNum formats a gauge that is usually whole (running, waiting) without
// a needless ".0".
func fmtNum(x float64) string {
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// fmtGPUs joins a rank's GPU group; "-" when it has none (sim).
func fmtGPUs(g []string) string {
	if len(g) == 0 {
		return "-"
	}
	return strings.Join(g, ",")
}

// fmtDevices is the table's GPU column: the rank's GPUs, else the vLLM
// data-parallel engine it is pinned to ("dp 1").
func fmtDevices(r schema.Replica) string {
	if len(r.GPUs) == 0 && r.DPRank != nil {
		return "dp " + strconv.Itoa(*r.DPRank)
	}
	return fmtGPUs(r.GPUs)
}

// fmtUp says whether a replica is routable, else its state.
func fmtUp(r schema.Replica) string {
	if r.Up {
		return "up"
	}
	if r.State != "" {
		return r.State
	}
	return "down"
}

// fmtOnOff renders the affinity badge.
func fmtOnOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// fmtSpill renders the spill threshold badge: "8 (auto)" when derived.
func fmtSpill(s schema.Status) string {
	v := strconv.Itoa(s.SpillThreshold)
	if s.SpillAuto {
		v += " (auto)"
	}
	return v
}

// fmtBytes formats a size compactly in binary units: "512M", "64.0G",
// "256G", "1.50T"; "0" for none.
func fmtBytes(n float64) string {
	const mib, gib, tib = 1 << 20, 1 << 30, 1 << 40
	switch {
	case n <= 0:
		return "0"
	case n < gib-mib/2:
		return strconv.FormatFloat(n/mib, 'f', 0, 64) + "M"
	case n < 99.95*gib:
		return strconv.FormatFloat(n/gib, 'f', 1, 64) + "G"
	case n < 1023.5*gib:
		return strconv.FormatFloat(n/gib, 'f', 0, 64) + "G"
	default:
		return strconv.FormatFloat(n/tib, 'f', 2, 64) + "T"
	}
}

// fmtIBytes is fmtBytes for prose: "64.0 GiB", "0 B".
func fmtIBytes(n float64) string {
	b := fmtBytes(n)
	if b == "0" {
		return "0 B"
	}
	return b[:len(b)-1] + " " + b[len(b)-1:] + "iB"
}

// fmtOffloadSize is a replica's host KV tier cell: its size, "on" when the
// size is unknown (LMCache), "-" without a tier.
func fmtOffloadSize(r schema.Replica) string {
	switch {
	case r.OffloadBytes > 0:
		return fmtBytes(float64(r.OffloadBytes))
	case r.HasOffload():
		return "on"
	}
	return "-"
}

// fmtOffloadHit is a replica's host-tier hit rate cell; "-" without a tier.
func fmtOffloadHit(r schema.Replica) string {
	if !r.HasOffload() {
		return "-"
	}
	return fmtPct(r.OffloadHitRate)
}

// offloadLine says in one sentence what the host KV tiers held and did
// since start (terminal table, exit summary; panel.js writes the same).
func offloadLine(s schema.Status) string {
	t := schema.TotalsOf(s.Replicas)
	var loaded, stored float64
	n, backend := 0, ""
	for _, r := range s.Replicas {
		if r.HasOffload() {
			n++
			if backend == "" {
				backend = r.OffloadBackend
			}
		}
		loaded += r.OffloadLoadedBytes
		stored += r.OffloadStoredBytes
	}
	size := "size unknown"
	if t.OffloadBytes > 0 {
		size = fmtIBytes(float64(t.OffloadBytes))
	}
	if backend == "" {
		backend = "native"
	}
	line := fmt.Sprintf("host KV tier (vLLM %s KV offloading): %s on %d of %d replicas; %s of %s prompt tokens "+
		"that missed the GPU cache found there (%s); %s loaded back, %s stored",
		backend, size, n, len(s.Replicas), fmtTokens(t.OffloadHits), fmtTokens(t.OffloadQueries),
		fmtPct(t.OffloadHitRate), fmtIBytes(loaded), fmtIBytes(stored))
	if f := filledOf(s.Replicas); f >= 0 {
		line += "; filled " + fmtPct(f) + " (stored since the engines started over the size)"
	}
	return line
}

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// fmtDuration renders an uptime as "1h02m03s", "4m05s" or "12s".
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	h := int(d / time.Hour)
	m := int(d % time.Hour / time.Minute)
	sec := int(d % time.Minute / time.Second)
	switch {
	case h > 0:
		return fmt.Sprintf("%dh%02dm%02ds", h, m, sec)
	case m > 0:
		return fmt.Sprintf("%dm%02ds", m, sec)
	default:
		return fmt.Sprintf("%ds", sec)
	}
}

// uptime is the status' uptime, from UptimeSeconds or else Now - Since.
func uptime(s schema.Status) time.Duration {
	if s.UptimeSeconds > 0 {
		return time.Duration(s.UptimeSeconds * float64(time.Second))
	}
	if !s.Since.IsZero() && s.Now.After(s.Since) {
		return s.Now.Sub(s.Since)
	}
	return 0
}

// sinceLine says since when the counters run.
func sinceLine(s schema.Status) string {
	if s.Since.IsZero() {
		return "counters since warden start"
	}
	return fmt.Sprintf("counters since %s (warden start, up %s)",
		s.Since.Local().Format("2006-01-02 15:04:05"), fmtDuration(uptime(s)))
}

// totalCapacity is the KV capacity of all replicas in tokens: Totals if the
// core filled it, else the sum of the rows.
func totalCapacity(s schema.Status) int {
	if s.Totals.KVCapacityTokens > 0 {
		return s.Totals.KVCapacityTokens
	}
	n := 0
	for _, r := range s.Replicas {
		n += r.KVCapacityTokens
	}
	return n
}

// count is "1 session", "2 sessions": n and the noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

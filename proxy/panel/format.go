package panel

import (
	"fmt"
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

// fmtUp says whether a replica is routable, else its state.
func fmtUp(r Replica) string {
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
func fmtSpill(s Status) string {
	v := strconv.Itoa(s.SpillThreshold)
	if s.SpillAuto {
		v += " (auto)"
	}
	return v
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
func uptime(s Status) time.Duration {
	if s.UptimeSeconds > 0 {
		return time.Duration(s.UptimeSeconds * float64(time.Second))
	}
	if !s.Since.IsZero() && s.Now.After(s.Since) {
		return s.Now.Sub(s.Since)
	}
	return 0
}

// sinceLine says since when the counters run.
func sinceLine(s Status) string {
	if s.Since.IsZero() {
		return "counters since warden start"
	}
	return fmt.Sprintf("counters since %s (warden start, up %s)",
		s.Since.Local().Format("2006-01-02 15:04:05"), fmtDuration(uptime(s)))
}

// totalCapacity is the KV capacity of all replicas in tokens: Totals if the
// proxy filled it, else the sum of the rows.
func totalCapacity(s Status) int {
	if s.Totals.KVCapacityTokens > 0 {
		return s.Totals.KVCapacityTokens
	}
	n := 0
	for _, r := range s.Replicas {
		n += r.KVCapacityTokens
	}
	return n
}

// Package journal writes the warden's log as text lines on stderr that the
// systemd journal files at their level: when stderr is the journal's stream
// (JOURNAL_STREAM names its device and inode, systemd.exec(5)), each line
// starts with its syslog priority, "<3>" error, "<4>" warning, "<6>" info,
// "<7>" debug (sd-daemon(3)), and carries no time of its own, as the
// journal stamps every line. Anywhere else the lines are slog's text
// format, unchanged. It knows nothing of what is logged.
package journal

import (
	"bytes"
	"io"
	"log/slog"
	"os"
)

// Handler is a slog text handler on f at level, in the journal's form when
// f is the journal's stream (getenv reads JOURNAL_STREAM).
func Handler(f *os.File, level slog.Leveler, getenv func(string) string) slog.Handler {
	if !isJournal(f, getenv("JOURNAL_STREAM")) {
		return slog.NewTextHandler(f, &slog.HandlerOptions{Level: level})
	}
	return slog.NewTextHandler(prioWriter{f}, &slog.HandlerOptions{Level: level, ReplaceAttr: dropTime})
}

// dropTime removes the record's time: the journal stamps each line.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// prioWriter prefixes each record with its priority. slog's text handler
// writes a record in one Write, starting with its level once the time is
// dropped.
type prioWriter struct{ w io.Writer }

var prios = []struct{ level, prio []byte }{
	{[]byte("level=ERROR"), []byte("<3>")},
	{[]byte("level=WARN"), []byte("<4>")},
	{[]byte("level=DEBUG"), []byte("<7>")},
}

func (p prioWriter) Write(b []byte) (int, error) {
	prio := []byte("<6>")
	for _, x := range prios {
		if bytes.HasPrefix(b, x.level) {
			prio = x.prio
			break
		}
	}
	if _, err := p.w.Write(append(prio, b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

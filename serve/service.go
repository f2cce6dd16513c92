package serve

import (
	"errors"
	"log/slog"

	"github.com/lmwarden/warden/internal/fdlimit"
)

// lowFDLimit is the file-descriptor limit below which the warden warns:
// a farm of agents keeps thousands of idle keep-alive connections, one
// descriptor each, and every stream holds another to its engine.
const lowFDLimit = 8192

// raiseFDLimit raises the file-descriptor soft limit to the hard limit and
// logs the result; a no-op where the system has no such limit.
func raiseFDLimit(log *slog.Logger) {
	l, err := fdlimit.Raise()
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return
	case err != nil:
		log.Warn("file-descriptor limit not raised: each client connection holds one", "err", err, "limit", l.Soft)
		return
	}
	attrs := []any{"soft", l.Soft, "hard", l.Hard}
	if l.Raised() {
		attrs = append(attrs, "raised_from", l.From)
	}
	if l.Soft < lowFDLimit {
		log.Warn("file-descriptor limit is low for a farm of agents (one per client connection, one more per stream): "+
			"raise the hard limit (ulimit -Hn, or LimitNOFILE= in the systemd unit)", attrs...)
		return
	}
	log.Info("file-descriptor limit", attrs...)
}

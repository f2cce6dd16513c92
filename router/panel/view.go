package panel

import (
	"bytes"
	"context"
	"fmt"
	"github.com/lmwarden/warden/router/schema"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/lmwarden/warden/internal/exit"
)

// StatusOptions are `warden status`'s settings.
type StatusOptions struct {
	URL      string        // the warden's base URL, or host:port
	Watch    bool          // redraw every Interval until interrupted
	Interval time.Duration // at least 100ms
	JSON     bool          // the raw status JSON instead of the table
	Timeout  time.Duration // how long to wait for the warden's answer
	Out      io.Writer
}

// ShowStatus is `warden status`: the status of the warden at o.URL once,
// or with Watch every Interval until ctx ends or SIGINT/SIGTERM (in place on
// a terminal). The error carries the exit status: 2 for bad options, 1 when
// the warden cannot be read once.
func ShowStatus(ctx context.Context, o StatusOptions) error {
	base, err := schema.NormalizeURL(o.URL)
	if err != nil {
		return exit.New(2, err.Error())
	}
	if o.Interval < 100*time.Millisecond {
		return exit.New(2, fmt.Sprintf("status: interval %s is below 100ms", o.Interval))
	}
	v := viewer{base: base, client: &http.Client{Timeout: o.Timeout}, json: o.JSON, out: o.Out}
	if !o.Watch {
		return v.once(ctx)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	v.tty = isTerminal(v.out)
	return v.watch(ctx, o.Interval)
}

// isTerminal reports whether w is a terminal (so --watch redraws in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// viewer prints the status of one warden.
type viewer struct {
	base   string
	client *http.Client
	json   bool // raw JSON instead of the table
	tty    bool // redraw in place
	out    io.Writer
}

// once fetches and prints one status; an error becomes the exit message.
func (v viewer) once(ctx context.Context) error {
	var b bytes.Buffer
	if err := v.render(ctx, &b); err != nil {
		return exit.New(1, err.Error())
	}
	_, err := v.out.Write(b.Bytes())
	return err
}

// render writes one frame: the table, or the raw JSON.
func (v viewer) render(ctx context.Context, w io.Writer) error {
	s, body, err := schema.Fetch(ctx, v.client, v.base)
	if err != nil {
		return err
	}
	if v.json {
		_, err = w.Write(bytes.TrimRight(body, "\n"))
		fmt.Fprintln(w)
		return err
	}
	formatStatusTable(w, s)
	return nil
}

// watch prints a frame every interval until ctx ends; a warden that goes
// away is reported in the frame and retried, not fatal.
func (v viewer) watch(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var b bytes.Buffer
		if !v.json {
			fmt.Fprintf(&b, "%s  every %s  %s  (Ctrl-C to stop)\n", v.base, interval, time.Now().Format("15:04:05"))
		}
		if err := v.render(ctx, &b); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintln(&b, err)
		}
		if err := v.frame(b.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// frame writes one frame: on a terminal it homes the cursor, clears each
// line's rest and then the screen below (no flicker); else it appends the
// frame after a blank line.
func (v viewer) frame(b []byte) error {
	if !v.tty {
		_, err := fmt.Fprintf(v.out, "%s\n", b)
		return err
	}
	text := strings.ReplaceAll(strings.TrimRight(string(b), "\n"), "\n", "\x1b[K\n")
	_, err := io.WriteString(v.out, "\x1b[H"+text+"\x1b[K\n\x1b[J")
	return err
}

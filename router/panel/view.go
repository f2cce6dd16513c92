package panel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/lmwarden/warden/internal/exit"
)

// DefaultURL is where `warden status` looks for a warden.
const DefaultURL = "http://127.0.0.1:8000"

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
	base, err := NormalizeURL(o.URL)
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

// NormalizeURL accepts "host:port" or a full http(s) URL and returns it
// without a trailing slash; a base URL as agents take it (ending in /v1,
// the API's root) stands for the warden it names.
func NormalizeURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", errors.New("--url is empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--url %q: want a URL such as %s", raw, DefaultURL)
	}
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1")
	u.RawPath = ""
	return strings.TrimRight(u.String(), "/"), nil
}

// isTerminal reports whether w is a terminal (so --watch redraws in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// FetchStatus reads the Status of the warden at base (e.g.
// http://127.0.0.1:8000) from StatusPath. It also returns the raw body.
// Errors say what was wrong: nothing listening, not a warden, bad JSON.
func FetchStatus(ctx context.Context, client *http.Client, base string) (Status, []byte, error) {
	var s Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+StatusPath, nil)
	if err != nil {
		return s, nil, fmt.Errorf("status request: %w", err)
	}
	res, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the message already
		}
		return s, nil, fmt.Errorf("no warden at %s: %w — is `warden serve` running?", base, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 32<<20))
	if err != nil {
		return s, nil, fmt.Errorf("reading %s%s: %w", base, StatusPath, err)
	}
	if res.StatusCode != http.StatusOK {
		return s, body, fmt.Errorf("%s%s answered %s: is this a warden (`warden serve`)?", base, StatusPath, res.Status)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return s, body, fmt.Errorf("%s%s did not answer a warden status: %w", base, StatusPath, err)
	}
	return s, body, nil
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
	s, body, err := FetchStatus(ctx, v.client, v.base)
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

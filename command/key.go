package command

import (
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
)

// announceKey says at start whether clients must send a key, and where the
// key came from (--api-key or its variable); and, when the shell exports
// the clients' WARDEN_API_KEY but no server key is set, that the warden
// requires none, so a 401 or its absence is never a surprise.
func announceKey(c *cli.Context) {
	w := c.App.ErrWriter
	if w == nil {
		w = os.Stderr
	}
	writeKeyNotice(w, c.String("api-key"), os.LookupEnv)
}

// writeKeyNotice is announceKey's text for the key given and the
// environment lookup.
func writeKeyNotice(w io.Writer, key string, lookup func(string) (string, bool)) {
	if key != "" {
		from := "--api-key"
		if env, ok := lookup(ServerKeyEnv); ok && env == key {
			from = ServerKeyEnv
		}
		fmt.Fprintf(w, "warden: clients must send the API key set by %s (Authorization: Bearer KEY or "+
			"x-api-key: KEY); requests without it get 401\n", from)
		return
	}
	if v, ok := lookup("WARDEN_API_KEY"); ok && v != "" {
		fmt.Fprintf(w, "warden: WARDEN_API_KEY is set in this shell: that is the key clients send; this warden "+
			"requires no key (to require one: --api-key or %s)\n", ServerKeyEnv)
	}
}

package serve

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/lmwarden/warden/router/schema"
)

// endpointLimits is the picker's second ready line: each endpoint by its
// host and port with the max_num_seqs the picker uses for it (learned from
// the server, else URL#max_num_seqs or --max-num-seqs), from which its
// spill threshold derives: engines of 32 read as 256 show here at once.
func endpointLimits(st schema.Status) string {
	var parts []string
	for _, r := range st.Replicas {
		where := r.URL
		if u, err := url.Parse(r.URL); err == nil && u.Host != "" {
			where = u.Host
		}
		parts = append(parts, fmt.Sprintf("%s %d", where, r.MaxNumSeqs))
	}
	return "warden: max_num_seqs " + strings.Join(parts, ", ") + " (from each server, else URL#max_num_seqs=N or --max-num-seqs)"
}

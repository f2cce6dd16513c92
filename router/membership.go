package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/place"
)

// replicaSet is the set of replicas in rank order. It is never changed in
// place: adding or removing a replica publishes a new set (under dyn.mu),
// readers load it without a lock, and the Placer is given the same list
// (a placement sees one consistent set: the Placer's, under its lock).
type replicaSet struct {
	list   []*Replica
	byRank map[int]*Replica
}

// Replicas returns the current replicas in rank order. Do not modify it.
func (c *Core) Replicas() []*Replica { return c.set.Load().list }

// Lookup returns the current replica with rank, nil if there is none.
func (c *Core) Lookup(rank int) *Replica { return c.set.Load().byRank[rank] }

// dynState is what adding and removing replicas at run time needs; mu
// guards it and serialises the changes (lock order: before the Placer's).
type dynState struct {
	mu       sync.Mutex
	nextRank int
	rankOf   map[string]int // replica URL -> its rank, kept after removal so a re-added URL gets its rank back
}

// publish makes list (sorted by rank here) the current replica set, the
// Placer's too. The caller holds dyn.mu, or is New.
func (c *Core) publish(list []*Replica) {
	slices.SortFunc(list, func(a, b *Replica) int { return a.rank - b.rank })
	s := &replicaSet{list: list, byRank: make(map[int]*Replica, len(list))}
	if c.dyn.rankOf == nil {
		c.dyn.rankOf = map[string]int{}
	}
	for _, r := range list {
		s.byRank[r.rank] = r
		c.dyn.rankOf[r.Key()] = r.rank
		c.dyn.nextRank = max(c.dyn.nextRank, r.rank+1)
	}
	c.set.Store(s)
	c.placer.SetReplicas(list)
}

// canonicalURL is the form replicas are compared and saved by: scheme and
// host in lower case, no trailing slash, no fragment, query or user info.
func canonicalURL(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + strings.TrimRight(u.Path, "/")
}

// ParseReplica reads a replica as `warden route --replica` and POST
// /warden/replicas take it: URL[#setting=value&...], e.g.
// http://10.0.0.5:8000#max_num_seqs=64. The URL must be http or https with a
// host. Settings: max_num_seqs=N (without it MaxNumSeqs is 0: ask the
// server); dp=N, the server's vLLM data-parallel engines (N>1: one pinned
// replica each, ExpandDP; 1: the server is one replica); dp_rank=R, one
// engine of such a server (Key's form). Rank is left 0 for the caller to
// set.
func ParseReplica(spec string) (Backend, error) {
	spec = strings.TrimSpace(spec)
	raw, frag, _ := strings.Cut(spec, "#")
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return Backend{}, fmt.Errorf("replica %q: want an http(s) URL with a host, e.g. http://10.0.0.5:8000", spec)
	}
	if u.RawQuery != "" || u.User != nil {
		return Backend{}, fmt.Errorf("replica %q: no query or user info in a replica URL", spec)
	}
	b := Backend{URL: canonicalURL(u)}
	for _, kv := range strings.FieldsFunc(frag, func(r rune) bool { return r == '&' || r == ',' }) {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.ReplaceAll(k, "-", "_") {
		case "max_num_seqs":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Backend{}, fmt.Errorf("replica %q: max_num_seqs must be a positive integer, not %q", spec, v)
			}
			b.MaxNumSeqs = n
		case "dp":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Backend{}, fmt.Errorf("replica %q: dp (the server's data-parallel engines) must be a positive integer, not %q", spec, v)
			}
			b.DP = n
		case "kv", "kv_events":
			b.KVEvents.Endpoint = v
		case "kv_replay":
			b.KVEvents.Replay = v
		case "dp_rank":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return Backend{}, fmt.Errorf("replica %q: dp_rank must be 0 or more, not %q", spec, v)
			}
			b.DPPinned, b.DPRank = true, n
		default:
			return Backend{}, fmt.Errorf("replica %q: unknown setting %q after # (known: max_num_seqs=N, dp=N, dp_rank=R, kv=ENDPOINT, kv_replay=ENDPOINT)", spec, k)
		}
	}
	if err := b.KVEvents.check(spec); err != nil {
		return Backend{}, err
	}
	if b.DPPinned && b.DP > 0 && b.DPRank >= b.DP {
		return Backend{}, fmt.Errorf("replica %q: dp_rank %d is not one of the server's %d engines (0..%d)", spec, b.DPRank, b.DP, b.DP-1)
	}
	return b, nil
}

// ErrUnknownReplica is returned by RemoveReplica for a URL or rank that is
// not a current replica.
var ErrUnknownReplica = errors.New("no such replica")

// ErrReplicaExists is returned by AddReplica for a URL that is already a
// current replica.
var ErrReplicaExists = errors.New("replica already present")

// ReplicaInfo describes a replica added or removed at run time.
type ReplicaInfo struct {
	Rank       int    `json:"rank"`
	URL        string `json:"url"`
	MaxNumSeqs int    `json:"max_num_seqs"`
	Sessions   int    `json:"sessions"` // conversations homed on it (on removal: they fail over on their next turn)
}

// AddReplica adds a replica at run time and returns it with its rank: the
// rank the URL had before if it was removed earlier (so its sessions, and
// their prefix cache, come home), else the next unused rank. b.Rank is
// ignored. A Backend with Probe set stays out of rotation until its first
// successful health check (the scrape loop's next round, or CheckNow).
func (c *Core) AddReplica(b Backend) (ReplicaInfo, error) {
	parsed, err := ParseReplica(b.URL)
	if err != nil {
		return ReplicaInfo{}, err
	}
	b.URL = parsed.URL
	if parsed.DPPinned && !b.DPPinned {
		b.DPPinned, b.DPRank = true, parsed.DPRank
	}
	c.dyn.mu.Lock()
	defer c.dyn.mu.Unlock()
	cur := c.set.Load()
	for _, r := range cur.list {
		if r.Key() == b.Key() {
			return ReplicaInfo{Rank: r.rank, URL: b.Key()}, fmt.Errorf("%w: %s is replica %d", ErrReplicaExists, b.Key(), r.rank)
		}
	}
	rank, seen := c.dyn.rankOf[b.Key()]
	if !seen {
		rank = c.dyn.nextRank
	}
	b.Rank = rank
	r, err := newReplica(b, &c.cfg)
	if err != nil {
		return ReplicaInfo{}, err
	}
	c.publish(append(slices.Clone(cur.list), r))
	info := ReplicaInfo{Rank: rank, URL: b.Key(), MaxNumSeqs: r.seqs(), Sessions: c.homed(rank)}
	c.log.Info("replica added", "replica", rank, "url", b.Key(), "sessions_homed", info.Sessions)
	return info, nil
}

// RemoveReplica takes the replica with the given URL (or, when url is "",
// rank) out of the core at run time; a URL without #dp_rank= takes every
// replica at that URL (all engines of a data-parallel server). Requests in
// flight on it finish; the session table is kept, and sessions homed on it
// fail over on their next turn (or come back if it is added again). The
// info returned is the first replica's, with the sessions of all.
func (c *Core) RemoveReplica(rawURL string, rank int) (ReplicaInfo, error) {
	var want Backend
	if rawURL != "" {
		b, err := ParseReplica(rawURL)
		if err != nil {
			return ReplicaInfo{}, err
		}
		want = b
	}
	match := func(r *Replica) bool {
		switch {
		case want.URL == "":
			return r.rank == rank
		case want.DPPinned:
			return r.Key() == want.Key()
		}
		return r.spec.URL == want.URL
	}
	c.dyn.mu.Lock()
	defer c.dyn.mu.Unlock()
	cur := c.set.Load()
	var gone []*Replica
	keep := slices.DeleteFunc(slices.Clone(cur.list), func(r *Replica) bool {
		if match(r) {
			gone = append(gone, r)
			return true
		}
		return false
	})
	if len(gone) == 0 {
		what := want.Key()
		if want.URL == "" {
			what = "rank " + strconv.Itoa(rank)
		}
		return ReplicaInfo{}, fmt.Errorf("%w: %s", ErrUnknownReplica, what)
	}
	c.publish(keep) // the Placer forgets them
	info := ReplicaInfo{Rank: gone[0].rank, URL: gone[0].Key(), MaxNumSeqs: gone[0].seqs()}
	for _, r := range gone {
		n := c.homed(r.rank)
		info.Sessions += n
		c.log.Info("replica removed", "replica", r.rank, "url", r.Key(), "sessions_to_fail_over", n,
			"in_flight", r.inflight.Load())
	}
	return info, nil
}

// homed is the number of sessions in the table whose home is rank.
func (c *Core) homed(rank int) (n int) {
	c.placer.Sessions(func(t *place.Table) { n = t.Homed(rank) })
	return n
}

// maxNumSeqsSources are where a vLLM server says its max_num_seqs: the
// inference config endpoint of recent releases, and the dev-mode server
// info (VLLM_SERVER_DEV_MODE=1) of older ones. vLLM's /metrics does not
// carry it (vllm:cache_config_info has the cache config only).
var maxNumSeqsSources = []struct{ path, field string }{
	{"/inference/v1/config", "scheduler.max_num_seqs"},
	{"/server_info?config_format=json", "vllm_config.scheduler_config.max_num_seqs"},
	{"/warden/status", "replicas.#.max_num_seqs"}, // a warden serve: the sum over its replicas
}

// maxNumSeqsText finds max_num_seqs in the text form of a vLLM config.
var maxNumSeqsText = regexp.MustCompile(`max_num_seqs['"]?\s*[=:]\s*(\d+)`)

// maxSeqsTries bounds how many checks ask a server that does not answer
// for its max_num_seqs.
const maxSeqsTries = 10

// learnLimits asks a replica added with Probe and no explicit max_num_seqs
// for its max_num_seqs, once, after it first answered its health check; it
// keeps the fallback when the server does not say.
func (c *Core) learnLimits(ctx context.Context, r *Replica) {
	if !r.learnSeqs.CompareAndSwap(true, false) {
		return
	}
	var failed []string
	for _, src := range maxNumSeqsSources {
		n := 0
		err := c.getOK(ctx, r.target.String()+src.path, func(body io.Reader) error {
			b, err := io.ReadAll(io.LimitReader(body, engine.MaxMetricsBytes))
			if err != nil {
				return err
			}
			n = maxNumSeqsFrom(b, src.field)
			return nil
		})
		if err == nil && n > 0 {
			r.maxNumSeqs.Store(int64(n))
			r.log.Info("max_num_seqs learned from the server", "max_num_seqs", n, "source", src.path)
			return
		}
		if err != nil && !strings.Contains(err.Error(), " 404 ") {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 && ctx.Err() == nil && r.seqsTries.Add(1) < maxSeqsTries {
		// Not answered (a timeout on a server busy starting), rather than
		// answered without it: ask again at the next check.
		r.learnSeqs.Store(true)
		r.log.Debug("max_num_seqs not learned yet", "errors", failed)
		return
	}
	r.log.Warn("the server does not say its max_num_seqs; assuming a value (set it with URL#max_num_seqs=N or --max-num-seqs)",
		"max_num_seqs", r.seqs())
}

// maxNumSeqsFrom reads max_num_seqs at field of a JSON body (summed when
// the field is a list), or from the text form of the config (older
// /server_info); 0 if absent.
func maxNumSeqsFrom(body []byte, field string) int {
	v := gjson.GetBytes(body, field)
	if v.Type == gjson.Number && v.Int() > 0 {
		return int(v.Int())
	}
	if v.IsArray() {
		n := 0
		for _, x := range v.Array() {
			n += int(x.Int())
		}
		return n
	}
	if cfg := gjson.GetBytes(body, "vllm_config"); cfg.Type == gjson.String {
		if m := maxNumSeqsText.FindStringSubmatch(cfg.Str); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// FallbackMaxNumSeqs is the max_num_seqs assumed for a replica added over
// HTTP until (unless) the server says its own: the largest of the current
// replicas' fallbacks, else vLLM's default (engine.VLLMMaxNumSeqs).
func (c *Core) FallbackMaxNumSeqs() int {
	n := 0
	for _, r := range c.Replicas() {
		n = max(n, r.fallbackSeqs)
	}
	if n == 0 {
		n = engine.VLLMMaxNumSeqs
	}
	return n
}

// CheckReplica polls the replica with rank once (its server's health and
// metrics), so that one just added enters the rotation as soon as it
// answers.
func (c *Core) CheckReplica(ctx context.Context, rank int) {
	r := c.Lookup(rank)
	if r == nil {
		return
	}
	for _, reps := range servers(c.Replicas()) {
		if reps[0].spec.URL == r.spec.URL {
			c.checkServer(ctx, reps)
			return
		}
	}
}

// expandDP replaces lead, a replica that was to learn its server's engines,
// by one replica pinned to each engine in ids (vLLM's data-parallel ranks),
// and returns them. The first keeps lead's rank; the others get the rank
// their key had before (a saved session table, an earlier expansion) or
// new ones. Unless lead is no longer current (removed meanwhile: nothing
// changes), it was out of rotation until now (a probed server), so no
// request is on it.
func (c *Core) expandDP(lead *Replica, ids []string) []*Replica {
	c.dyn.mu.Lock()
	defer c.dyn.mu.Unlock()
	cur := c.set.Load()
	i := slices.Index(cur.list, lead)
	if i < 0 || !lead.learnDP.CompareAndSwap(true, false) {
		return []*Replica{lead}
	}
	used := map[int]bool{}
	for _, r := range cur.list {
		if r != lead {
			used[r.rank] = true
		}
	}
	var reps []*Replica
	for _, id := range ids {
		dp, err := strconv.Atoi(id)
		if err != nil || dp < 0 {
			continue
		}
		b := lead.spec
		b.DPPinned, b.DPRank, b.DP, b.LearnDP = true, dp, len(ids), false
		b.KVEvents = lead.spec.KVEvents.ForRank(dp)
		rank, seen := c.dyn.rankOf[b.Key()]
		switch {
		case seen && !used[rank]:
		case !used[lead.rank]:
			rank = lead.rank
		default:
			rank = c.dyn.nextRank
			c.dyn.nextRank++
		}
		used[rank], b.Rank = true, rank
		r, err := newReplica(b, &c.cfg)
		if err != nil {
			continue
		}
		if lead.maxNumSeqs.Load() > 0 && !lead.learnSeqs.Load() {
			r.maxNumSeqs.Store(lead.maxNumSeqs.Load())
		}
		reps = append(reps, r)
	}
	if len(reps) < 2 {
		return []*Replica{lead}
	}
	list := slices.Delete(slices.Clone(cur.list), i, i+1)
	c.publish(append(list, reps...))
	ranks := make([]int, len(reps))
	for j, r := range reps {
		ranks[j] = r.rank
	}
	c.log.Info("the server runs vLLM data parallelism: one replica per engine, each request pinned with "+
		"X-data-parallel-rank", "url", lead.spec.URL, "engines", len(reps), "replicas", ranks)
	return reps
}

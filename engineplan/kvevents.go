package engineplan

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/internal/argv"
)

// KVEventsFlag is vLLM's flag that turns its KV-cache events on.
const KVEventsFlag = "--kv-events-config"

// KVEvents is how an engine the warden starts publishes its KV-cache
// events (vLLM's --kv-events-config, docs/kv-events.md), so that the
// router's ledger reads what the engine holds. The zero value: none.
//
// One server per rank: the engine binds ipc sockets in Dir (a folder only
// the warden's user can open: the events carry the prompts' token ids),
// named by its port. vLLM's own data parallelism (one server, DP ranks):
// vLLM offsets a tcp port by the rank and refuses ipc above rank 0, so each
// rank connects out to 127.0.0.1:Pub+rank, which the warden binds, and
// binds its replay socket on 127.0.0.1:Replay+rank.
type KVEvents struct {
	Dir         string
	Pub, Replay int
}

// On reports whether the engine publishes events.
func (k KVEvents) On() bool { return k.Dir != "" || k.Pub > 0 }

// Endpoints are where the engine serving on port publishes rank's events:
// its PUB endpoint, its replay endpoint, and whether the subscriber binds
// the PUB endpoint (the engine connects out).
func (k KVEvents) Endpoints(port, rank int) (pub, replay string, subscriberBinds bool) {
	if k.Pub > 0 {
		return "tcp://127.0.0.1:" + strconv.Itoa(k.Pub+rank), "tcp://127.0.0.1:" + strconv.Itoa(k.Replay+rank), true
	}
	base := "ipc://" + filepath.Join(k.Dir, "kv-"+strconv.Itoa(port))
	return base + ".sock", base + "-replay.sock", false
}

// Config is the --kv-events-config value of the engine serving on port
// (the rank-0 endpoints: vLLM offsets the others).
func (k KVEvents) Config(port int) string {
	pub, replay, _ := k.Endpoints(port, 0)
	b, _ := json.Marshal(map[string]any{"enable_kv_cache_events": true, "publisher": "zmq",
		"endpoint": pub, "replay_endpoint": replay})
	return string(b)
}

// ownKVEvents reports whether the user's arguments after -- configure the
// engine's events themselves (the warden then adds none).
func (e Engine) ownKVEvents() bool { return argv.Has(e.Extra, KVEventsFlag, "--kv_events_config") }

// UserKVEvents reads the user's own --kv-events-config after -- (ok false
// without one, or when it turns events off): the endpoints the warden
// subscribes to. An endpoint the engine binds on every address (tcp://*:P)
// is reached on loopback; a plain tcp://host:port is one the engine
// connects out to, so the warden binds it.
func UserKVEvents(extra []string) (pub, replay string, subscriberBinds, ok bool) {
	v, has := argv.Value(extra, KVEventsFlag, "--kv_events_config")
	if !has {
		return "", "", false, false
	}
	var c struct {
		Enable    bool   `json:"enable_kv_cache_events"`
		Publisher string `json:"publisher"`
		Endpoint  string `json:"endpoint"`
		Replay    string `json:"replay_endpoint"`
	}
	if json.Unmarshal([]byte(v), &c) != nil || !c.Enable || c.Publisher == "null" {
		return "", "", false, false
	}
	if c.Endpoint == "" {
		c.Endpoint = "tcp://*:5557" // vLLM's default
	}
	local := func(ep string) string { return strings.Replace(ep, "*", "127.0.0.1", 1) }
	binds := !strings.Contains(c.Endpoint, "*") && !strings.Contains(c.Endpoint, "::") &&
		!strings.HasPrefix(c.Endpoint, "ipc://") && !strings.HasPrefix(c.Endpoint, "inproc://")
	return local(c.Endpoint), local(c.Replay), binds, true
}

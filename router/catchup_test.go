package router

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

// TestReadyWaitsForTheEnginesHistory: a core whose replica's engine
// publishes KV events does not claim readiness while its feed is still
// asking the engine's replay socket for the history (the socket has taken
// the connection and not answered), and does once the feed has caught up
// (here: the replay gone, as from an engine that has none).
func TestReadyWaitsForTheEnginesHistory(t *testing.T) {
	dir, err := os.MkdirTemp("", "kv") // short: an ipc path must fit in 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", dir+"/replay.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer engine.Close()
	c := testCoreBackends(t, Config{}, []Backend{{Rank: 0, URL: engine.URL, MaxNumSeqs: 32,
		KVEvents: KVEvents{Endpoint: "ipc://" + dir + "/kv.sock", Replay: "ipc://" + dir + "/replay.sock"}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	conn := <-accepted // the feed is replaying the engine's history now
	if !c.Replicas()[0].Healthy() {
		t.Fatal("the replica is not in rotation: the test would prove nothing")
	}
	if c.Ready() || c.CaughtUp() {
		t.Fatal("ready while the engine's history is being replayed")
	}
	conn.Close()
	ln.Close()
	simproc.Poll(t, "ready once the feed has caught up", c.Ready)
}

package serve

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/router"
)

// TestEndpointsFileReloadKeepsOtherEndpoints: the endpoints file owns only
// the engines it names; a reload leaves the --replica engines and one
// added through the admin API (POST /warden/replicas, core.AddReplica) in
// place, and removes what the file itself no longer names.
func TestEndpointsFileReloadKeepsOtherEndpoints(t *testing.T) {
	var urls []string
	for range 4 {
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	hostPort := func(u string) (string, string) {
		h, p, _ := strings.Cut(strings.TrimPrefix(u, "http://"), ":")
		return h, p
	}
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	write := func(us ...string) {
		var b strings.Builder
		b.WriteString("endpoints:\n")
		for i, u := range us {
			h, p := hostPort(u)
			b.WriteString("  - {name: e" + string(rune('a'+i)) + ", address: \"" + h + "\", port: \"" + p + "\"}\n")
		}
		if err := os.WriteFile(file+".new", []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	write(urls[1]) // the file: engine 1; --replica: engine 0
	cfg, err := EPPOptions{Replicas: []string{urls[0]}, EndpointsFile: file, MaxNumSeqs: 32, GRPCPort: 1,
		Router: Router{Host: "127.0.0.1", Port: 2, Subagents: "own", MaxBodyBytes: "1MiB", Policy: "sticky", Affinity: true}}.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Core.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	core, err := router.New(cfg.Core, cfg.Replicas)
	if err != nil {
		t.Fatal(err)
	}
	added, _ := parseReplicas([]string{urls[2]}, 32, -1)
	if _, err := core.AddReplica(added[0]); err != nil { // what POST /warden/replicas does
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go watchEndpointsFile(ctx, cfg, core, cfg.Core.Logger)
	have := func() []string {
		var out []string
		for _, r := range core.Status().Replicas {
			out = append(out, strings.TrimSuffix(r.URL, "/"))
		}
		slices.Sort(out)
		return out
	}
	want := []string{urls[0], urls[2], urls[3]}
	slices.Sort(want)
	for deadline := time.Now().Add(30 * time.Second); ; {
		write(urls[3]) // the file now names engine 3 instead of 1 (rewritten until the watch has seen it)
		if slices.Equal(have(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas after the reload %v, want %v (the --replica engine and the admin API's kept, the file's 1 replaced by 3)", have(), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

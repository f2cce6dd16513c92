package panel

import (
	"bytes"
	"github.com/lmwarden/warden/router/schema"
	"strings"
	"testing"
)

// Boxes of a farm often share a port: the status table names each by its
// host too (issue 45: the picker showed two rows of port 8000); engines on
// this machine keep the port alone.
func TestStatusTableNamesRemoteHosts(t *testing.T) {
	s := schema.Status{Policy: "adaptive", Replicas: []schema.Replica{
		{Rank: 0, URL: "http://10.0.0.5:8000", Port: 8000, Up: true},
		{Rank: 1, URL: "http://box-b.lan:8000", Port: 8000, Up: true},
	}}
	var b bytes.Buffer
	formatStatusTable(&b, s)
	out := b.String()
	for _, want := range []string{"endpoint", "10.0.0.5:8000", "box-b.lan:8000"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	s.Replicas = []schema.Replica{{Rank: 0, URL: "http://127.0.0.1:8101", Port: 8101, Up: true}, {Rank: 1, URL: "http://localhost:8102", Port: 8102, Up: true}}
	b.Reset()
	formatStatusTable(&b, s)
	if out := b.String(); strings.Contains(out, "endpoint") || strings.Contains(out, "127.0.0.1") || !strings.Contains(out, "8101") {
		t.Errorf("loopback engines should show their port alone:\n%s", out)
	}
}

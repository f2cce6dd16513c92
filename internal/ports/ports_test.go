package ports

import (
	"net"
	"strings"
	"testing"
)

func TestFree(t *testing.T) {
	ports, err := Free(8, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p <= 0 {
			t.Errorf("port %d repeated or invalid in %v", p, ports)
		}
		seen[p] = true
		if err := Bindable("127.0.0.1", p); err != nil {
			t.Errorf("Free gave %d but it cannot be bound: %v", p, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	if err := Bindable("127.0.0.1", busy); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Bindable on a listening port = %v, want an in-use error", err)
	}
	if _, err := Free(0, "127.0.0.1"); err == nil {
		t.Error("Free(0) succeeded")
	}
	if _, err := Free(1, "no-such-host.invalid"); err == nil {
		t.Error("Free on a bad host succeeded")
	}
	if p, err := Loopback(); err != nil || p <= 0 {
		t.Errorf("Loopback = %d, %v", p, err)
	}
}

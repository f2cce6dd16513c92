package serve

import (
	"net"
	"strings"
	"testing"
)

// TestCheckHost: a --host that cannot be an address is refused with what
// one looks like; addresses and names pass.
func TestCheckHost(t *testing.T) {
	for host, want := range map[string]string{
		"0.0.0.0.1":   "is not an IPv4 address",
		"127.0.0.256": "is not an IPv4 address",
		"[::1]":       "without brackets",
		"gpu-box:80":  "the port goes in --port",
		"127.0.0.1":   "",
		"0.0.0.0":     "",
		"::1":         "",
		"localhost":   "",
		"":            "",
	} {
		err := checkHost(host)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("checkHost(%q) = %v, want %q", host, err, want)
		}
	}
}

// TestListenErrorNamesWhatToChange: a taken port names --port; an address
// that is not this machine's names --host, not the port.
func TestListenErrorNamesWhatToChange(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = net.Listen("tcp", taken.Addr().String())
	if msg := listenError("warden serve", taken.Addr().String(), err); !strings.Contains(msg, "is taken") ||
		!strings.Contains(msg, "choose another --port") {
		t.Errorf("taken port: %q", msg)
	}
	addr := "192.0.2.77:8000" // TEST-NET-1: no machine's own address
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		t.Skip("this machine has 192.0.2.77")
	}
	if msg := listenError("warden serve", addr, err); !strings.Contains(msg, "not an address of this machine") ||
		strings.Contains(msg, "--port") {
		t.Errorf("foreign address: %q", msg)
	}
}

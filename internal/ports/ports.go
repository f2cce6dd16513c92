// Package ports finds free TCP ports: the one helper behind the engines'
// loopback ports (launch), the port a `warden serve` child of run or sweep
// listens on, and the tests' simulators (simproc).
package ports

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Free returns n distinct TCP ports on host that were free a moment ago:
// each was bound (all at once, so they differ) and released. host is usually
// "127.0.0.1". n must be >= 1.
func Free(n int, host string) ([]int, error) {
	if n < 1 {
		return nil, fmt.Errorf("free ports: need at least 1, asked for %d", n)
	}
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("free ports on %s: %w", host, err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Loopback is one TCP port on 127.0.0.1 that was free a moment ago.
func Loopback() (int, error) {
	p, err := Free(1, "127.0.0.1")
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// Bindable reports whether host:port can be bound now. Some vLLM versions
// set SO_REUSEPORT, so a port held by a stale engine may still be bindable
// by a new vLLM: warden checks with a plain bind instead.
func Bindable(host string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d on %s is in use: %w", port, host, errors.Unwrap(err))
	}
	return ln.Close()
}

// Run returns the first of n consecutive TCP ports on host that were all
// free a moment ago (vLLM's data-parallel ranks publish their KV-cache
// events on a base port plus the rank). It tries a few bases the kernel
// hands out and fails if none has n free ports after it.
func Run(n int, host string) (int, error) {
	for range 20 {
		base, err := Free(1, host)
		if err != nil {
			return 0, err
		}
		ok := true
		for p := base[0]; p < base[0]+n && ok; p++ {
			ok = p < 65536 && Bindable(host, p) == nil
		}
		if ok {
			return base[0], nil
		}
	}
	return 0, fmt.Errorf("free ports on %s: no run of %d consecutive free ports found", host, n)
}

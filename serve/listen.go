package serve

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"syscall"
)

// dottedNumbers is a --host made only of digits and dots: meant as an IPv4
// address, never a host name.
var dottedNumbers = regexp.MustCompile(`^[0-9.]+$`)

// checkHost refuses a --host that cannot be an address before anything
// starts: an IPv4 address with a wrong count of numbers or a number over
// 255 (0.0.0.0.1), an IPv6 address in brackets, or a name with a port.
// Names are left to the listener, whose error listenError explains.
func checkHost(host string) error {
	switch {
	case host == "" || net.ParseIP(host) != nil:
		return nil
	case dottedNumbers.MatchString(host):
		return fmt.Errorf("--host %s is not an IPv4 address (four numbers 0-255: 127.0.0.1 for this machine only, "+
			"0.0.0.0 for every interface)", host)
	case strings.HasPrefix(host, "["):
		return fmt.Errorf("--host %s: give an IPv6 address without brackets (e.g. ::1)", host)
	case strings.Contains(host, ":"):
		return fmt.Errorf("--host %s is not an address; the port goes in --port", host)
	}
	return nil
}

// listenError says why the public listener could not be bound and what to
// change: the port (taken, or privileged) or the host (not this machine's,
// or a name that does not resolve).
func listenError(cmd, addr string, err error) string {
	host, port, _ := net.SplitHostPort(addr)
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Sprintf("%s: port %s is taken on %s (another warden or server?); choose another --port", cmd, port, host)
	case errors.Is(err, syscall.EACCES):
		return fmt.Sprintf("%s: not allowed to listen on port %s (ports below 1024 need privileges); "+
			"choose another --port", cmd, port)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Sprintf("%s: %s is not an address of this machine; choose another --host "+
			"(127.0.0.1, 0.0.0.0, or one of its interfaces' addresses)", cmd, host)
	case errors.As(err, &dns):
		return fmt.Sprintf("%s: --host %s does not resolve (%v); give an IP address or a name of this machine",
			cmd, host, dns.Err)
	}
	return fmt.Sprintf("%s: cannot listen on %s: %v (check --host and --port)", cmd, addr, err)
}

package kvevents

import (
	"fmt"
	"strconv"
	"strings"
)

// IsBindEndpoint reports whether vLLM's publisher binds endpoint (rather than connecting
// out to it): wildcard hosts ("*", "::") and ipc:// or inproc:// endpoints bind; a plain
// tcp://host:port connects, so the subscriber must bind it (SubscriberConfig.Bind).
// It is ZmqEventPublisher._is_bind_endpoint.
func IsBindEndpoint(endpoint string) bool {
	return strings.Contains(endpoint, "*") || strings.Contains(endpoint, "::") ||
		strings.HasPrefix(endpoint, "ipc://") || strings.HasPrefix(endpoint, "inproc://")
}

// RankEndpoint returns the endpoint data-parallel rank uses, as vLLM's
// offset_endpoint_port does: unchanged for rank 0 or "", inproc gets a "_dp<rank>" suffix,
// a tcp port is offset by rank (port 0 left for the OS). Other transports (ipc://) cannot
// be offset: an error, as in vLLM.
func RankEndpoint(endpoint string, rank int) (string, error) {
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	if strings.Contains(endpoint, "inproc") {
		return fmt.Sprintf("%s_dp%d", endpoint, rank), nil
	}
	if !strings.Contains(endpoint, "tcp") {
		return "", fmt.Errorf("kvevents: endpoint %q for data-parallel rank %d: must be tcp:// or inproc:// (vLLM offsets the port by the rank)", endpoint, rank)
	}
	i := strings.LastIndex(endpoint, ":")
	if i < 0 {
		return endpoint, nil
	}
	port, err := strconv.Atoi(endpoint[i+1:])
	if err != nil {
		return "", fmt.Errorf("kvevents: endpoint %q: port: %w", endpoint, err)
	}
	if port == 0 {
		return endpoint, nil
	}
	return endpoint[:i+1] + strconv.Itoa(port+rank), nil
}

package epp

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"text/template"
	"time"

	"github.com/lmwarden/warden/router"
)

// EnvoyOptions shape the Envoy bootstrap that puts the picker in front of
// the engines (`warden epp envoy-config`).
type EnvoyOptions struct {
	Listen string // host:port clients connect to
	// EPP are the pickers' gRPC addresses (host:port), one or more: Envoy
	// spreads the ext_proc streams over them (round robin), checks each
	// one's gRPC readiness every second and leaves out one that fails it
	// (a picker down, or one still catching up from the engines), and on a
	// picker it cannot connect to retries the stream on another.
	EPP       []string
	Admin     string     // host:port of Envoy's admin interface; "" = 127.0.0.1:9901
	Endpoints []Endpoint // the engines, as the picker knows them
	// FailOpen lets a request through when the picker cannot be reached:
	// it goes to the least-loaded engine without stickiness. Envoy 1.40
	// fails closed in the protocol's full-duplex mode whatever
	// failure_mode_allow says (measured: 500), so fail-open buffers the
	// request body (up to MaxBodyBytes) and streams the answer through the
	// picker instead. false: full-duplex, and the client gets 500 while the
	// picker is down.
	FailOpen     bool
	MaxBodyBytes int64 // FailOpen: the largest request body Envoy buffers
	// Retries are the gateway's tries on the picker's fallbacks after the
	// pick could not be reached; 0 = none.
	Retries int
	// Hold bounds the picker's answer to one message: it may hold a new
	// conversation while the KV caches are full (place.MaxHold).
	Hold time.Duration
	// StreamIdle ends a stream with no bytes for this long.
	StreamIdle time.Duration
	// WithoutPicker leaves the picker out: no ext_proc filter, no picker
	// cluster, and the engines' cluster on Envoy's own least-request
	// balancing. Not for production: a baseline to measure the picker
	// against (scripts/epp-compare.sh). EPP is then not read.
	WithoutPicker bool
}

// WriteEnvoyConfig writes the bootstrap: a listener whose ext_proc filter
// asks the picker (full-duplex streamed, trailers sent, envoy.lb metadata
// forwarded both ways) and a cluster of the engines whose override_host
// policy sends each request to the picked endpoint, retries on the
// fallbacks after it, reports the endpoint that served under envoy.lb, and
// falls back to least-request when no pick is given (fail-open). Envoy's
// ORIGINAL_DST cluster is not used: it takes one address, not the
// protocol's list, so it cannot retry on the fallbacks.
func WriteEnvoyConfig(w io.Writer, o EnvoyOptions) error {
	if o.Admin == "" {
		o.Admin = "127.0.0.1:9901"
	}
	if len(o.Endpoints) == 0 {
		return fmt.Errorf("no endpoints: name the engines with --replica URL or --endpoints-file FILE")
	}
	type addr struct {
		Host string
		Port int
	}
	split := func(flag, hp string) (addr, error) {
		host, port, err := net.SplitHostPort(hp)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
			return addr{}, fmt.Errorf("%s %q: want HOST:PORT", flag, hp)
		}
		return addr{host, n}, nil
	}
	var data struct {
		Listen, Admin    addr
		EPPs             []addr
		Engines          []addr
		FailOpen         bool
		WithoutPicker    bool
		Retries          int
		Hold, StreamIdle string
		MaxBody          int64
	}
	var err error
	if data.Listen, err = split("--listen", o.Listen); err != nil {
		return err
	}
	if o.WithoutPicker && o.FailOpen {
		return fmt.Errorf("--fail-open is the picker's failure mode; without the picker there is none: drop one of them")
	}
	if data.WithoutPicker = o.WithoutPicker; !o.WithoutPicker {
		if len(o.EPP) == 0 {
			return fmt.Errorf("--epp: name the picker's gRPC address (HOST:PORT; repeat for several pickers)")
		}
		for _, e := range o.EPP {
			a, err := split("--epp", e)
			if err != nil {
				return err
			}
			if slices.Contains(data.EPPs, a) {
				return fmt.Errorf("--epp %s named twice", e)
			}
			data.EPPs = append(data.EPPs, a)
		}
	}
	if data.Admin, err = split("--admin", o.Admin); err != nil {
		return err
	}
	for _, e := range o.Endpoints {
		a, err := split("endpoint", e.HostPort())
		if err != nil {
			return err
		}
		data.Engines = append(data.Engines, a)
	}
	data.FailOpen, data.Retries, data.MaxBody = o.FailOpen, o.Retries, o.MaxBodyBytes
	if data.MaxBody <= 0 {
		data.MaxBody = router.DefaultMaxBodyBytes
	}
	data.Hold = fmt.Sprintf("%ds", int((o.Hold + time.Minute).Seconds()))
	data.StreamIdle = fmt.Sprintf("%ds", int(o.StreamIdle.Seconds()))
	return envoyTemplate.Execute(w, data)
}

var envoyTemplate = template.Must(template.New("envoy").Parse(`{{if .WithoutPicker}}# Envoy bootstrap WITHOUT the warden's endpoint picker (warden epp envoy-config --without-picker):
# a baseline for comparisons. Clients -> this listener -> Envoy's least-request balancing over the engines;
# no stickiness, so conversations do not find their prefix cached except by chance.{{else}}# Envoy bootstrap for the warden's endpoint picker (warden epp envoy-config).
# Clients -> this listener -> ext_proc asks a picker ({{range $i, $e := .EPPs}}{{if $i}}, {{end}}{{$e.Host}}:{{$e.Port}}{{end}}) -> the picked engine.{{if gt (len .EPPs) 1}}
# Several pickers: each stream goes to one (round robin) among those whose gRPC readiness passes (checked every
# second); a picker Envoy cannot connect to is skipped and the stream retried on another. Pickers that listen to
# the engines' KV events agree on every conversation's home (docs/epp.md, "Several pickers").{{end}}
# Fail-{{if .FailOpen}}open: with the picker unreachable, requests go to the least-loaded engine (no stickiness);
# request bodies are buffered (up to {{.MaxBody}} bytes) since Envoy fails closed in full-duplex mode.{{else}}closed: with the picker unreachable, clients get 500 (full-duplex streamed, the protocol's mode).{{end}}{{end}}
admin:
  address:
    socket_address: {address: {{.Admin.Host}}, port_value: {{.Admin.Port}}}
static_resources:
  listeners:
  - name: warden
    address:
      socket_address: {address: {{.Listen.Host}}, port_value: {{.Listen.Port}}}{{if .FailOpen}}
    per_connection_buffer_limit_bytes: {{.MaxBody}}{{end}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: warden
          stream_idle_timeout: {{.StreamIdle}}
          route_config:
            name: warden
            virtual_hosts:
            - name: engines
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route:
                  cluster: warden_engines
                  timeout: 0s # an answer streams as long as it takes
                  retry_policy:
                    retry_on: connect-failure,refused-stream,reset-before-request
                    num_retries: {{.Retries}}
          http_filters:{{if not .WithoutPicker}}
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: {cluster_name: warden_epp}
                retry_policy: # a picker that cannot be reached (killed, restarting): the stream on another one
                  retry_on: connect-failure,refused-stream,unavailable,reset-before-request
                  num_retries: {{len .EPPs}}
                  retry_back_off: {base_interval: 0.05s, max_interval: 0.2s}
                  retry_host_predicate: [{name: envoy.retry_host_predicates.previous_hosts,
                    typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}}]
                  host_selection_retry_max_attempts: 3
              failure_mode_allow: {{.FailOpen}}
              message_timeout: {{.Hold}} # the picker may hold a new conversation until a cache has room
              processing_mode:
                request_header_mode: SEND
                response_header_mode: SEND{{if .FailOpen}}
                request_body_mode: BUFFERED
                response_body_mode: STREAMED{{else}}
                request_body_mode: FULL_DUPLEX_STREAMED
                response_body_mode: FULL_DUPLEX_STREAMED
                request_trailer_mode: SEND
                response_trailer_mode: SEND{{end}}
              metadata_options: # the pick comes back as envoy.lb metadata; the served endpoint and the subset hint go out
                forwarding_namespaces:
                  untyped: [envoy.lb, envoy.lb.subset_hint]
                receiving_namespaces:
                  untyped: [envoy.lb]{{end}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:{{if not .WithoutPicker}}
  - name: warden_epp
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: # pings the picker: a picker gone without a FIN (a host down) is noticed in 40 s
          http2_protocol_options: {connection_keepalive: {interval: 30s, timeout: 10s}}
    common_lb_config: {update_merge_window: 0s} # a picker's health change reaches the balancing at once, not up to 1 s later
    health_checks: # gRPC readiness: a picker down, draining or still catching up leaves the picks until it passes
    - timeout: 1s
      interval: 1s
      no_traffic_interval: 1s
      unhealthy_threshold: 1
      healthy_threshold: 1
      grpc_health_check: {service_name: readiness}
    outlier_detection: # a picker that refuses connections leaves at once, before its next health check
      consecutive_local_origin_failure: 1
      split_external_local_origin_errors: true
      interval: 1s
      base_ejection_time: 2s
      max_ejection_percent: 100
    load_assignment:
      cluster_name: warden_epp
      endpoints:
      - lb_endpoints:{{range .EPPs}}
        - endpoint:
            address:
              socket_address: {address: {{.Host}}, port_value: {{.Port}}}{{end}}{{end}}
  - name: warden_engines
    type: STATIC
    connect_timeout: 2s
    circuit_breakers:
      thresholds:
      - {max_connections: 100000, max_pending_requests: 100000, max_requests: 100000, max_retries: 10000}
    load_balancing_policy:
      policies:{{if .WithoutPicker}}
      - typed_extension_config:
          name: envoy.load_balancing_policies.least_request
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest{{else}}
      - typed_extension_config:
          name: envoy.load_balancing_policies.override_host
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost
            override_host_sources:
            - metadata: {key: envoy.lb, path: [{key: x-gateway-destination-endpoint}]}
            selected_host_key: {key: envoy.lb, path: [{key: x-gateway-destination-endpoint-served}]}
            fallback_policy:
              policies:
              - typed_extension_config:
                  name: envoy.load_balancing_policies.least_request
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest{{end}}
    load_assignment:
      cluster_name: warden_engines
      endpoints:
      - lb_endpoints:{{range .Engines}}
        - endpoint:
            address:
              socket_address: {address: {{.Host}}, port_value: {{.Port}}}{{end}}
`))

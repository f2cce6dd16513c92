package command

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/epp"
	"github.com/lmwarden/warden/epp/eppcheck"
	"github.com/lmwarden/warden/internal/exit"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/serve"
)

// The picker's defaults: gRPC where llm-d's EPP listens, the panel and
// metrics on their own port.
const (
	defaultGRPCPort = 9002
	defaultEPPPort  = 9090
)

// eppEndpointFlags name the engines, the same for the picker and the Envoy
// config it goes with.
func eppEndpointFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "replica", EnvVars: envVars("REPLICA"),
			Usage: "an engine (vLLM or a warden) by IP address: http://IP:PORT[#max_num_seqs=N]; repeat or separate with commas"},
		kvEventsEndpointFlag(), kvEventsReplayFlag(),
		&cli.StringFlag{Name: "endpoints-file", EnvVars: envVars("ENDPOINTS_FILE"),
			Usage: "engines listed in llm-d's file-discovery schema (endpoints: [{name, address, port}]); watched"},
	}
}

// eppFlags are `warden epp`'s flags: the engines', the picker's, then the
// router's that apply to a picker (the gateway carries the bytes: no API
// key, model mapping, billing block or response-header timeout here).
func eppFlags() []cli.Flag {
	notHere := []string{"api-key", "keep-billing-header", "strict-model", "response-header-timeout", "stream-idle-timeout", "max-replays", "port"}
	var rf []cli.Flag
	for _, f := range routerFlags() {
		if !slices.Contains(notHere, f.Names()[0]) {
			rf = append(rf, f)
		}
	}
	return append(append(eppEndpointFlags(),
		&cli.IntFlag{Name: "grpc-port", Value: defaultGRPCPort, EnvVars: envVars("GRPC_PORT"),
			Usage: "port of the ext_proc and gRPC health services (on --host)"},
		&cli.IntFlag{Name: "port", Value: defaultEPPPort, EnvVars: envVars("PORT"),
			Usage: "port of the status page, /metrics, /warden/status and the admin endpoints (on --host)"},
		&cli.IntFlag{Name: "fallbacks", Value: epp.DefaultFallbacks, EnvVars: envVars("FALLBACKS"),
			Usage: "endpoints named after the pick, least loaded first, for the gateway to retry on"},
		&cli.IntFlag{Name: "max-num-seqs", Value: engine.VLLMMaxNumSeqs, EnvVars: envVars("MAX_NUM_SEQS"),
			Usage: "max_num_seqs assumed for an engine that does not say its own; the spill threshold derives from it"},
		&cli.StringFlag{Name: "served-model-name", EnvVars: envVars("SERVED_MODEL_NAME"),
			Usage: "the model name shown in the status (default: what the engines answer on /v1/models)"},
		&cli.StringFlag{Name: "state-file", EnvVars: envVars("STATE_FILE"),
			Usage: "`FILE` the session table is saved to and reloaded from, for engines that publish no KV events (default: none; with events the engines' replay is the picker's memory)"},
		&cli.DurationFlag{Name: "state-interval", Value: 30 * time.Second, EnvVars: envVars("STATE_INTERVAL"),
			Usage: "with --state-file, how often the session table is saved while running (always on exit)"},
	), rf...)
}

// eppCommand is `warden epp` and its `envoy-config`.
func eppCommand() *cli.Command {
	return &cli.Command{
		Name:  "epp",
		Usage: "the warden's placement as an endpoint picker behind a gateway (Envoy, Gateway API inference gateways)",
		Description: "Serves the Gateway API Inference Extension's endpoint-picker protocol over Envoy's external\n" +
			"processing gRPC (full-duplex streamed) on --grpc-port: each request's conversation is identified and\n" +
			"placed exactly as `warden serve` does, and the gateway is told the endpoint (x-gateway-destination-endpoint,\n" +
			"with fallbacks). The panel, /metrics and /warden/status are on --port. `warden epp envoy-config` prints an\n" +
			"Envoy bootstrap that uses it (docs/epp.md).",
		Flags:       eppFlags(),
		Action:      action(func(c *cli.Context) error { return serve.EPP(c.Context, eppOptions(c), c.App.Writer) }),
		Subcommands: []*cli.Command{envoyConfigCommand(), eppCheckCommand()},
	}
}

func eppOptions(c *cli.Context) serve.EPPOptions {
	r := routerOptions(c)
	r.ResponseHeaderTimeout = proxy.DefaultResponseHeaderTimeout // not a picker's: the gateway times the engines
	return serve.EPPOptions{
		Replicas: c.StringSlice("replica"), EndpointsFile: c.String("endpoints-file"), MaxNumSeqs: c.Int("max-num-seqs"),
		KVEvents: kvEventsOptions(c), StateFile: c.String("state-file"), StateInterval: c.Duration("state-interval"),
		ServedName: c.String("served-model-name"), GRPCPort: c.Int("grpc-port"), Fallbacks: c.Int("fallbacks"), Router: r,
	}
}

// envoyConfigCommand is `warden epp envoy-config`.
func envoyConfigCommand() *cli.Command {
	return &cli.Command{
		Name:  "envoy-config",
		Usage: "print an Envoy bootstrap that puts `warden epp` in front of the engines",
		Description: "The listener's ext_proc filter asks the picker at --epp; the engines' cluster sends each request to\n" +
			"the picked endpoint (Envoy's override_host policy), retries the fallbacks, and reports the endpoint that\n" +
			"served back to the picker. Run it with `envoy -c FILE` (scripts/envoy.sh installs Envoy here).\n" +
			"--without-picker prints the same bootstrap with no picker (Envoy's least-request balancing alone),\n" +
			"for side-by-side comparisons (scripts/epp-compare.sh).",
		Flags: append(eppEndpointFlags(),
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", EnvVars: envVars("ENVOY_LISTEN"),
				Usage: "address clients connect to (HOST:PORT)"},
			&cli.StringSliceFlag{Name: "epp", Value: cli.NewStringSlice(fmt.Sprintf("127.0.0.1:%d", defaultGRPCPort)), EnvVars: envVars("ENVOY_EPP"),
				Usage: "a picker's gRPC address (HOST:PORT, as warden epp's --grpc-port); repeat for several pickers (Envoy spreads the streams, health-checks each, skips one that is down)"},
			&cli.StringFlag{Name: "admin", Value: "127.0.0.1:9901", EnvVars: envVars("ENVOY_ADMIN"),
				Usage: "Envoy's admin interface (HOST:PORT; keep it on loopback)"},
			&cli.BoolFlag{Name: "fail-open", EnvVars: envVars("ENVOY_FAIL_OPEN"),
				Usage: "with the picker unreachable, send requests to the least-loaded engine (buffers request bodies: Envoy fails closed in full-duplex mode); default: 500"},
			&cli.StringFlag{Name: "max-body-bytes", Value: humanize.IBytes(router.DefaultMaxBodyBytes), EnvVars: envVars("ENVOY_MAX_BODY_BYTES"),
				Usage: "with --fail-open, the largest request body Envoy buffers"},
			&cli.IntFlag{Name: "retries", Value: epp.DefaultFallbacks, EnvVars: envVars("ENVOY_RETRIES"),
				Usage: "tries on the fallbacks when the picked engine cannot be reached"},
			&cli.BoolFlag{Name: "without-picker", EnvVars: envVars("ENVOY_WITHOUT_PICKER"),
				Usage: "leave the picker out: no ext_proc filter, the engines on Envoy's least-request balancing (no stickiness); a baseline for side-by-side comparisons, not for production; --epp is ignored"},
			&cli.DurationFlag{Name: "stream-idle-timeout", Value: proxy.DefaultResponseHeaderTimeout, EnvVars: envVars("ENVOY_STREAM_IDLE_TIMEOUT"),
				Usage: "end a request whose stream has sent nothing for this long"},
		),
		Action: action(func(c *cli.Context) error {
			eps, err := serve.EPPEndpoints(c.StringSlice("replica"), c.String("endpoints-file"))
			if err != nil {
				return exit.New(2, "warden epp envoy-config: "+err.Error())
			}
			maxBody, err := humanize.ParseBytes(c.String("max-body-bytes"))
			if err != nil || maxBody == 0 {
				return exit.Newf(2, "warden epp envoy-config: --max-body-bytes %q is not a size such as 32MiB", c.String("max-body-bytes"))
			}
			err = epp.WriteEnvoyConfig(c.App.Writer, epp.EnvoyOptions{Listen: c.String("listen"), EPP: c.StringSlice("epp"),
				Admin: c.String("admin"), Endpoints: eps, FailOpen: c.Bool("fail-open"), MaxBodyBytes: int64(maxBody), Retries: c.Int("retries"),
				Hold: place.MaxHold, StreamIdle: c.Duration("stream-idle-timeout"), WithoutPicker: c.Bool("without-picker")})
			if err != nil {
				return exit.New(2, "warden epp envoy-config: "+err.Error())
			}
			return nil
		}),
	}
}

// eppCheckCommand is `warden epp check`: any endpoint picker put through
// what a real gateway and real clients do (epp/eppcheck).
func eppCheckCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "put an endpoint picker (this one, llm-d's, GIE's) through what Envoy 1.40 and real clients do",
		Description: "Speaks Envoy's side of ext_proc to the picker at --target: both body modes, bodies in many pieces and\n" +
			"up to --max-body-bytes, trailers, empty bodies, GET without a body, clients that go away before the first\n" +
			"byte and mid-answer, the subset hint, the served-endpoint report, immediate answers, the health services\n" +
			"and --concurrent streams at once. Prints each check; exits 1 when one fails, 2 when --target is not a\n" +
			"picker. The engines behind the picker are never called (docs/epp.md).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "target", Required: true, EnvVars: envVars("CHECK_TARGET"), Usage: "the picker's gRPC address (HOST:PORT)"},
			&cli.StringFlag{Name: "model", Value: "eppcheck", EnvVars: envVars("CHECK_MODEL"), Usage: "the model name in the request bodies"},
			&cli.StringFlag{Name: "max-body-bytes", Value: humanize.IBytes(eppcheck.DefaultMaxBody), EnvVars: envVars("CHECK_MAX_BODY_BYTES"),
				Usage: "the largest request body the picker must take"},
			&cli.IntFlag{Name: "concurrent", Value: eppcheck.DefaultConcurrent, EnvVars: envVars("CHECK_CONCURRENT"), Usage: "streams at once in the load check"},
			&cli.DurationFlag{Name: "timeout", Value: eppcheck.DefaultTimeout, EnvVars: envVars("CHECK_TIMEOUT"), Usage: "the longest wait for one exchange"},
		},
		Action: action(func(c *cli.Context) error {
			maxBody, err := humanize.ParseBytes(c.String("max-body-bytes"))
			if err != nil || maxBody == 0 {
				return exit.Newf(2, "warden epp check: --max-body-bytes %q is not a size such as 4MiB", c.String("max-body-bytes"))
			}
			w := c.App.Writer
			fmt.Fprintf(w, "warden epp check: %s, as Envoy 1.40 would speak to it\n", c.String("target"))
			res, err := eppcheck.Run(c.Context, eppcheck.Config{Target: c.String("target"), Model: c.String("model"),
				MaxBody: int(maxBody), Concurrent: c.Int("concurrent"), Timeout: c.Duration("timeout")},
				func(r eppcheck.Result) { fmt.Fprintln(w, r) })
			if errors.Is(err, eppcheck.ErrNotAPicker) {
				return exit.New(2, "warden epp check: FAIL: "+err.Error())
			}
			if err != nil {
				return exit.New(2, "warden epp check: "+err.Error())
			}
			n := map[eppcheck.Verdict]int{}
			for _, r := range res {
				n[r.Verdict]++
			}
			fmt.Fprintf(w, "%d checks: %d passed, %d failed, %d not checked\n", len(res), n[eppcheck.Pass], n[eppcheck.Fail], n[eppcheck.NotChecked])
			if n[eppcheck.Fail] > 0 {
				return exit.Newf(1, "warden epp check: %d checks failed", n[eppcheck.Fail])
			}
			return nil
		}),
	}
}

package command

import (
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/hostcpu"
	"github.com/lmwarden/warden/launch"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/engine"
	"github.com/lmwarden/warden/router/place"
	"github.com/lmwarden/warden/serve"
	"github.com/lmwarden/warden/sim"
)

// Flag groups of `warden serve --help` and `warden route --help` (urfave/cli
// lists them by name).
const (
	catEngines   = "Engines"
	catDevices   = "Engines' devices"
	catAccess    = "Router: listening and access"
	catPlacement = "Router: placement"
	catRun       = "Router: logs, timeouts and shutdown"
	catReplicas  = "Replicas"
)

// routerFlags are the flags of the router in front of the engines, the same
// for `warden serve` (engines it launched) and `warden route` (engines that
// were already running): where it listens, how it places conversations and
// who may use its admin endpoints.
func routerFlags() []cli.Flag {
	access := inCategory(catAccess,
		&cli.StringFlag{Name: "host", Value: "127.0.0.1", EnvVars: envVars("HOST"),
			Usage: "`ADDRESS` the warden listens on; 0.0.0.0 to serve other hosts"},
		&cli.IntFlag{Name: "port", Value: 8000, EnvVars: envVars("PORT"),
			Usage: "the one public port: OpenAI and Anthropic APIs, status page, /metrics"},
		&cli.StringFlag{Name: "api-key", EnvVars: []string{ServerKeyEnv},
			Usage: "require this `KEY` from clients on /v1/* (Bearer or x-api-key; 401 otherwise); " +
				"never logged or forwarded. Not WARDEN_API_KEY: that is the key clients send"},
		&cli.StringFlag{Name: "admin-token", EnvVars: envVars("ADMIN_TOKEN"),
			Usage: "bearer `TOKEN` for admin endpoints (policy switch, cache reset, replicas) from other hosts"},
		&cli.StringFlag{Name: "max-body-bytes", Value: humanize.IBytes(router.DefaultMaxBodyBytes), EnvVars: envVars("MAX_BODY_BYTES"),
			Usage: "largest request body; larger ones get 413"},
		&cli.BoolFlag{Name: "strict-model", EnvVars: envVars("STRICT_MODEL"),
			Usage: "404 (like vLLM) for a model name other than the served one, instead of serving it"},
	)
	placement := inCategory(catPlacement,
		&cli.StringFlag{Name: "policy", Value: place.PolicyAdaptive, EnvVars: envVars("POLICY"),
			Usage: "routing `POLICY`: " + strings.Join(place.Policies(), ", ") + " (docs/routing.md)"},
		&cli.BoolFlag{Name: "affinity", Value: true, EnvVars: envVars("AFFINITY"),
			Usage: "session affinity; --affinity=false is --policy off"},
		&cli.IntFlag{Name: "spill-threshold", EnvVars: envVars("SPILL_THRESHOLD"),
			Usage: "in-flight requests on a replica above which a sticky turn spills (0: max(1, max_num_seqs/4))"},
		&cli.DurationFlag{Name: "admit-wait", EnvVars: envVars("ADMIT_WAIT"),
			Usage: "adaptive: longest a new conversation waits for KV room (0: 5 mean turn times; <0: never)"},
		&cli.IntFlag{Name: "move-cooldown", EnvVars: envVars("MOVE_COOLDOWN"),
			Usage: "adaptive: turns a moved conversation stays on its new replica (0: 3)"},
		&cli.Float64Flag{Name: "kv-fill", EnvVars: envVars("KV_FILL"),
			Usage: "adaptive: share of each KV cache planned for working sets (0: 1.0; >1 overcommits)"},
		&cli.StringFlag{Name: "subagents", Value: "own", EnvVars: envVars("SUBAGENTS"),
			Usage: "own: a subagent is a conversation of its own, placed by load; parent: it follows its parent; " +
				"near: its own conversation, placed beside its parent while that replica is under the spill threshold"},
		&cli.BoolFlag{Name: "fair-share", Value: router.DefaultFairShare, EnvVars: envVars("FAIR_SHARE"),
			Usage: "admit requests while a replica can start them and queue the rest fairly across agent trees (false: the engines queue them first come first served)"},
		&cli.DurationFlag{Name: "queue-max-wait", Value: router.DefaultQueueMaxWait, EnvVars: envVars("QUEUE_MAX_WAIT"),
			Usage: "--fair-share: longest a request waits in the queue before it is told to retry (429/529 with Retry-After)"},
		&cli.IntFlag{Name: "queue-max-len", Value: router.DefaultQueueMaxLen, EnvVars: envVars("QUEUE_MAX_LEN"),
			Usage: "--fair-share: most requests waiting; past it the last in the fair order is told to retry"},
		&cli.DurationFlag{Name: "ramp-up", Value: router.DefaultRampUp, EnvVars: envVars("RAMP_UP"),
			Usage: "time a replica back in rotation takes to reach its full share of new conversations (0: at once)"},
		&cli.StringSliceFlag{Name: "session-header", EnvVars: envVars("SESSION_HEADER"),
			Usage: "extra request `HEADER`(s) that carry a session id (after the known agent headers)"},
		&cli.BoolFlag{Name: "keep-billing-header", EnvVars: envVars("KEEP_BILLING_HEADER"),
			Usage: "forward Claude Code's per-conversation billing block (removed by default: it defeats prefix sharing)"},
		&cli.DurationFlag{Name: "balancer-interval", Value: router.DefaultBalancerInterval, EnvVars: envVars("BALANCER_INTERVAL"),
			Usage: "off, off-v2: period of the load sample they decide on (vLLM's coordinator's)"},
		&cli.DurationFlag{Name: "scrape-interval", Value: router.DefaultScrapeInterval, EnvVars: envVars("SCRAPE_INTERVAL"),
			Usage: "period of the poll of every engine's /metrics and /health (each costs ~15-30 ms of its CPU)"},
	)
	run := inCategory(catRun,
		&cli.DurationFlag{Name: "response-header-timeout", Value: proxy.DefaultResponseHeaderTimeout, EnvVars: envVars("RESPONSE_HEADER_TIMEOUT"),
			Usage: "wait this long for an engine's response headers, then 504 naming the replica"},
		&cli.DurationFlag{Name: "stream-idle-timeout", Value: proxy.DefaultStreamIdleTimeout, EnvVars: envVars("STREAM_IDLE_TIMEOUT"),
			Usage: "end a stream silent this long after its first token (a wedged engine); <0: never"},
		&cli.IntFlag{Name: "max-replays", Value: proxy.DefaultMaxReplays, EnvVars: envVars("MAX_REPLAYS"),
			Usage: "replay a request on another replica at most this often after an engine closed the connection before answering; <0: never"},
		&cli.StringFlag{Name: "decision-log", EnvVars: envVars("DECISION_LOG"),
			Usage: "write one JSON line per routed request to `FILE` (docs/operations.md)"},
		&cli.IntFlag{Name: "decision-log-max-mb", Value: router.DefaultDecisionLogMaxMB, EnvVars: envVars("DECISION_LOG_MAX_MB"),
			Usage: "rotate the --decision-log file at this many MB, keeping three old files"},
		&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, EnvVars: envVars("DRAIN_TIMEOUT"),
			Usage: "on Ctrl-C or SIGTERM, how long in-flight requests may finish (a second Ctrl-C: at once)"},
	)
	return append(append(access, placement...), run...)
}

// ServerKeyEnv is the variable of the router's --api-key, the key clients
// must send. It is not WARDEN_API_KEY, which `warden run --api-key` reads
// and the client setups in docs/clients.md export: a shell set up for a
// client must not silently make the warden it starts require a key.
const ServerKeyEnv = "WARDEN_SERVER_API_KEY"

// serveFlags are `warden serve`'s flags: the engines', then the router's.
func serveFlags() []cli.Flag {
	engines := inCategory(catEngines,
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, EnvVars: envVars("MODEL"), Required: true,
			Usage: "`MODEL` to serve (Hugging Face id or local path), as vllm serve takes it (required)"},
		&cli.StringFlag{Name: "served-model-name", EnvVars: envVars("SERVED_MODEL_NAME"),
			Usage: "the one model `NAME` every replica answers to (default: --model)"},
		&cli.IntFlag{Name: "dp", Value: 1, EnvVars: envVars("DP"),
			Usage: "data-parallel size: engine replicas, each with its own prefix cache"},
		&cli.IntFlag{Name: "tp", Value: 1, EnvVars: envVars("TP"),
			Usage: "tensor-parallel size: GPUs per replica (dp x tp GPUs are needed)"},
		&cli.StringFlag{Name: "engine", Value: "vllm", EnvVars: envVars("ENGINE"),
			Usage: "vllm, or sim: the built-in simulator (no GPU; answers are filler text, docs/simulator.md)"},
		&cli.StringFlag{Name: "vllm", Value: "vllm", EnvVars: envVars("VLLM"),
			Usage: "`PATH` of the vllm executable"},
		&cli.BoolFlag{Name: "vllm-dp", EnvVars: envVars("VLLM_DP"),
			Usage: "start one vllm serve --data-parallel-size DP (vLLM's own data parallelism) instead of one server " +
				"per rank; each rank is one of its engines, pinned with X-data-parallel-rank (docs/vllm-dp.md)"},
		&cli.BoolFlag{Name: "kv-events", Value: true, EnvVars: envVars("KV_EVENTS"),
			Usage: "the engines publish their KV-cache events to the router, which then places by what each engine " +
				"holds instead of an estimate (docs/kv-events.md); --kv-events=false: the estimate alone"},
		&cli.StringFlag{Name: "image", EnvVars: envVars("IMAGE"),
			Usage: "run each rank's vLLM in a container of this `IMAGE` instead of a host install (docs/container.md)"},
		&cli.StringFlag{Name: "container-runtime", EnvVars: envVars("CONTAINER_RUNTIME"), DefaultText: "docker, else podman",
			Usage: "--image: the container runtime, docker or podman (a name on PATH or a path)"},
		&cli.IntFlag{Name: "max-num-seqs", EnvVars: envVars("MAX_NUM_SEQS"),
			Usage: "vLLM --max-num-seqs per replica (0: vLLM's default); the spill threshold derives from it"},
		&cli.StringFlag{Name: "tools", Value: engineplan.ToolsAuto, EnvVars: envVars("TOOLS"),
			Usage: "tool calling: auto (the --tool-call-parser that fits the model, docs/tools.md), off, or a parser"},
		&cli.StringFlag{Name: "reasoning", Value: engineplan.ToolsAuto, EnvVars: envVars("REASONING"),
			Usage: "vLLM's --reasoning-parser: auto (the model's, when it thinks), off, or a parser name"},
		&cli.StringFlag{Name: "log-dir", EnvVars: envVars("LOG_DIR"),
			Usage: "`DIR` for per-rank engine logs (default: $XDG_STATE_HOME/warden/runs/<time>-<pid>)"},
		&cli.DurationFlag{Name: "startup-timeout", Value: launch.DefaultStartupTimeout, EnvVars: envVars("STARTUP_TIMEOUT"),
			Usage: "give up when a replica is not healthy after this long (large models load for minutes)"},
		&cli.DurationFlag{Name: "stop-grace", Value: launch.DefaultStopGrace, EnvVars: envVars("STOP_GRACE"),
			Usage: "after SIGTERM to an engine's process group, how long before SIGKILL"},
	)
	devices := inCategory(catDevices,
		&cli.StringFlag{Name: "device", Value: "gpu", EnvVars: envVars("DEVICE"),
			Usage: "gpu (NVIDIA; --tp GPUs per rank) or cpu (vLLM's CPU build; each rank on its own cores)"},
		&cli.StringFlag{Name: "gpus", EnvVars: envVars("GPUS"),
			Usage: "GPU indices or UUIDs to use, comma-separated (default: all visible)"},
		&cli.StringFlag{Name: "cpu-kv-cache", Value: "auto", EnvVars: envVars("CPU_KV_CACHE"),
			Usage: "--device cpu: KV cache per rank (e.g. 4GiB; auto: half the memory left, split)"},
		&cli.StringFlag{Name: "cpu-pin", Value: hostcpu.PinCores, EnvVars: envVars("CPU_PIN"),
			Usage: "--device cpu: cores (each rank's processes on its cores) or threads (compute threads only)"},
		&cli.StringFlag{Name: "kv-offload", EnvVars: envVars("KV_OFFLOAD"), DefaultText: "auto on GPUs, else off",
			Usage: "host-RAM KV tier per rank (vLLM's KV offloading): off, a size (e.g. 32GiB), or auto: " +
				"4 x a rank's GPU KV cache as the host allows (docs/kv-offload.md)"},
	)
	return append(append(engines, devices...), routerFlags()...)
}

// serveCommand is `warden serve`.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "launch one engine per data-parallel rank and a sticky router in front of them",
		ArgsUsage: "[-- extra vLLM serve arguments]",
		Description: "Finds the GPUs, starts one `vllm serve` per rank on its own loopback port, waits until all\n" +
			"are healthy, and serves the OpenAI and Anthropic APIs on --port, keeping each conversation on\n" +
			"the replica that has its prefix cached. Arguments after -- go to every engine verbatim.\n\n" +
			"Without GPUs: --engine sim runs the same job on the built-in simulator.",
		Flags: serveFlags(),
		Action: action(func(c *cli.Context) error {
			if err := processGroups("warden serve"); err != nil {
				return err
			}
			announceKey(c)
			return serve.Main(c.Context, serveOptions(c), c.App.Writer)
		}),
	}
}

// routeFlags are `warden route`'s flags: the replicas', then the router's.
func routeFlags() []cli.Flag {
	return append(inCategory(catReplicas,
		&cli.StringSliceFlag{Name: "replica", EnvVars: envVars("REPLICA"),
			Usage: "a running vLLM (or warden) `URL`[#max_num_seqs=N][&dp=N] to route to; repeat or separate with commas"},
		kvEventsEndpointFlag(), kvEventsReplayFlag(),
		&cli.StringFlag{Name: "replicas-file", EnvVars: envVars("REPLICAS_FILE"),
			Usage: "`FILE` of replicas, one URL[#max_num_seqs=N][&dp=N] per line (# comments); re-read on SIGHUP"},
		&cli.IntFlag{Name: "dp-ranks", EnvVars: envVars("DP_RANKS"),
			Usage: "`N` vLLM data-parallel engines behind each replica URL, each routed as a replica and pinned with " +
				"X-data-parallel-rank (0: learn them from each server's /metrics; 1: route each server as one)"},
		&cli.IntFlag{Name: "max-num-seqs", Value: engine.VLLMMaxNumSeqs, EnvVars: envVars("MAX_NUM_SEQS"),
			Usage: "max_num_seqs of a replica that does not say its own; the spill threshold derives from it"},
		&cli.StringFlag{Name: "served-model-name", EnvVars: envVars("SERVED_MODEL_NAME"),
			Usage: "the model `NAME` clients use (default: what the replicas answer on /v1/models at start)"},
		&cli.StringFlag{Name: "state-file", EnvVars: envVars("STATE_FILE"),
			Usage: "`FILE` the session table is saved to and reloaded from (none: off; default: " +
				"$XDG_STATE_HOME/warden/route-<port>.sessions.json)"},
		&cli.DurationFlag{Name: "state-interval", Value: 30 * time.Second, EnvVars: envVars("STATE_INTERVAL"),
			Usage: "how often the session table is saved while running (always on exit)"},
	), routerFlags()...)
}

// routeCommand is `warden route`.
func routeCommand() *cli.Command {
	return &cli.Command{
		Name:  "route",
		Usage: "a sticky router in front of vLLM servers that are already running (this host or others)",
		Description: "Routes the OpenAI and Anthropic APIs on --port to the --replica servers, keeping each conversation on\n" +
			"the replica that has its prefix cached, exactly as `warden serve` does for the engines it launches; it\n" +
			"launches and stops nothing. Replicas that are down are retried and routed around; replicas can be added\n" +
			"and removed at run time (POST/DELETE /warden/replicas); the session table survives a restart (--state-file).\n" +
			"SIGHUP re-reads --replicas-file. A replica can itself be a `warden serve` on another host.",
		Flags: routeFlags(),
		Action: action(func(c *cli.Context) error {
			announceKey(c)
			return serve.Route(c.Context, routeOptions(c), c.App.Writer)
		}),
	}
}

// devicesCommand is `warden devices`: the GPUs and the CPUs the warden
// sees, and with --dp what each rank of `serve --device cpu` would get.
func devicesCommand() *cli.Command {
	return &cli.Command{
		Name:  "devices",
		Usage: "what the warden can run engines on: NVIDIA GPUs, and CPU cores, NUMA nodes and memory",
		Description: "Lists the GPUs (as `warden gpus`) and the CPUs the warden may use (its affinity mask), by\n" +
			"NUMA node, with the memory available. With --dp N it shows what `warden serve --device cpu --dp N`\n" +
			"would give each rank: its cores, the cores vLLM binds its compute threads to, and its KV cache.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "dp", EnvVars: envVars("DP"), Usage: "show the CPU split for this many ranks"},
			&cli.StringFlag{Name: "cpu-kv-cache", Value: "auto", EnvVars: envVars("CPU_KV_CACHE"),
				Usage: "KV cache per rank for the --dp split (as warden serve --cpu-kv-cache)"},
			&cli.BoolFlag{Name: "json", EnvVars: envVars("DEVICES_JSON"), Usage: "print JSON instead of tables"},
		},
		Action: action(func(c *cli.Context) error {
			return serve.Devices(c.Context, serve.DevicesOptions{DP: c.Int("dp"), CPUKVCache: c.String("cpu-kv-cache"),
				JSON: c.Bool("json")}, c.App.Writer)
		}),
	}
}

// routerOptions reads the router's flags (serve's and route's).
func routerOptions(c *cli.Context) serve.Router {
	return serve.Router{
		Host: c.String("host"), Port: c.Int("port"), Policy: c.String("policy"), Affinity: c.Bool("affinity"),
		BalancerInterval: c.Duration("balancer-interval"), ScrapeInterval: c.Duration("scrape-interval"),
		SpillThreshold: c.Int("spill-threshold"), AdmitWait: c.Duration("admit-wait"),
		MoveCooldown: c.Int("move-cooldown"), Subagents: c.String("subagents"),
		FairShare: c.Bool("fair-share"), QueueMaxWait: c.Duration("queue-max-wait"), QueueMaxLen: c.Int("queue-max-len"),
		RampUp: c.Duration("ramp-up"), KVFill: c.Float64("kv-fill"), SessionHeaders: c.StringSlice("session-header"),
		KeepBillingHeader: c.Bool("keep-billing-header"), StrictModel: c.Bool("strict-model"),
		AdminToken: c.String("admin-token"), APIKey: c.String("api-key"), MaxBodyBytes: c.String("max-body-bytes"),
		ResponseHeaderTimeout: c.Duration("response-header-timeout"), StreamIdleTimeout: c.Duration("stream-idle-timeout"),
		MaxReplays: c.Int("max-replays"), DecisionLog: c.String("decision-log"),
		DecisionLogMaxMB: c.Int("decision-log-max-mb"), DrainTimeout: c.Duration("drain-timeout"),
	}
}

// serveOptions reads `warden serve`'s flags; the arguments after -- are
// the engines'.
func serveOptions(c *cli.Context) serve.Options {
	return serve.Options{
		Model: c.String("model"), ServedName: c.String("served-model-name"), DP: c.Int("dp"), TP: c.Int("tp"),
		GPUs: c.String("gpus"), Device: c.String("device"), CPUKVCache: c.String("cpu-kv-cache"),
		CPUPin: c.String("cpu-pin"), KVOffload: c.String("kv-offload"), Tools: c.String("tools"), Reasoning: c.String("reasoning"),
		MaxNumSeqs: c.Int("max-num-seqs"), Engine: c.String("engine"), VLLMPath: c.String("vllm"),
		LogDir: c.String("log-dir"), StartupTimeout: c.Duration("startup-timeout"), StopGrace: c.Duration("stop-grace"),
		Extra: c.Args().Slice(), Router: routerOptions(c), SimKVCache: sim.KVCacheBytes, SimFirstContact: sim.FirstContact,
		SimModelContext: sim.ModelContext,
		Image:           c.String("image"), ContainerRuntime: c.String("container-runtime"), VLLMDP: c.Bool("vllm-dp"),
		KVEvents: c.Bool("kv-events"),
	}
}

// routeOptions reads `warden route`'s flags.
func routeOptions(c *cli.Context) serve.RouteOptions {
	return serve.RouteOptions{
		Replicas: c.StringSlice("replica"), ReplicasFile: c.String("replicas-file"), MaxNumSeqs: c.Int("max-num-seqs"),
		KVEvents: kvEventsOptions(c),
		DPRanks:  c.Int("dp-ranks"), ServedName: c.String("served-model-name"), StateFile: c.String("state-file"),
		StateInterval: c.Duration("state-interval"), Router: routerOptions(c),
	}
}

// kvEventsEndpointFlag and kvEventsReplayFlag name where engines the
// warden did not start publish their KV-cache events (route, epp).
func kvEventsEndpointFlag() cli.Flag {
	return &cli.StringFlag{Name: "kv-events-endpoint", EnvVars: envVars("KV_EVENTS_ENDPOINT"),
		Usage: "where each replica's vLLM publishes its KV-cache events (its --kv-events-config endpoint), as a " +
			"`TEMPLATE` with {host} the replica's host, e.g. tcp://{host}:5557; a replica's own URL#kv=ENDPOINT wins; " +
			"none: placement estimates what each engine holds (docs/kv-events.md)"}
}

func kvEventsReplayFlag() cli.Flag {
	return &cli.StringFlag{Name: "kv-events-replay", EnvVars: envVars("KV_EVENTS_REPLAY"),
		Usage: "each replica's KV-event replay endpoint (its replay_endpoint), a `TEMPLATE` as --kv-events-endpoint's, " +
			"e.g. tcp://{host}:5558: a router that starts late or loses events catches up from it; URL#kv_replay= wins"}
}

// kvEventsOptions reads the two flags above.
func kvEventsOptions(c *cli.Context) serve.KVEventsOptions {
	return serve.KVEventsOptions{Endpoint: c.String("kv-events-endpoint"), Replay: c.String("kv-events-replay")}
}

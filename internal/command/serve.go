package command

import (
	"time"

	"github.com/dustin/go-humanize"
	"github.com/urfave/cli/v2"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/hostcpu"
	"github.com/lmwarden/warden/proxy"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/serve"
	"github.com/lmwarden/warden/sim"
)

// routerFlags are the flags of the router in front of the engines, the same
// for `warden serve` (engines it launched) and `warden route` (engines that
// were already running): where it listens, how it places conversations and
// who may use its admin endpoints.
func routerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "host", Value: "127.0.0.1", EnvVars: envVars("HOST"),
			Usage: "address the warden listens on; 0.0.0.0 to serve other hosts"},
		&cli.IntFlag{Name: "port", Value: 8000, EnvVars: envVars("PORT"),
			Usage: "the one public port clients use (OpenAI and Anthropic APIs, status page, /metrics)"},
		&cli.StringFlag{Name: "policy", Value: "adaptive", EnvVars: envVars("POLICY"),
			Usage: "routing policy: adaptive (sticky, plus KV-aware admission of new conversations and cost-based moves), sticky (keep a conversation on its replica), off (vLLM-like shortest queue), hash, ..."},
		&cli.BoolFlag{Name: "affinity", Value: true, EnvVars: envVars("AFFINITY"),
			Usage: "session affinity; --affinity=false is --policy off"},
		&cli.DurationFlag{Name: "balancer-interval", Value: router.DefaultBalancerInterval, EnvVars: envVars("BALANCER_INTERVAL"),
			Usage: "period of the load sample the vLLM-style balancers (off, off-v2) decide on, as vLLM's coordinator publishes engine stats"},
		&cli.DurationFlag{Name: "scrape-interval", Value: router.DefaultScrapeInterval, EnvVars: envVars("SCRAPE_INTERVAL"),
			Usage: "period of the poll of every engine's /metrics and /health (load, KV use, counters, prefill rate); each poll costs the engine's API server ~15-30 ms on a busy CPU core"},
		&cli.IntFlag{Name: "spill-threshold", EnvVars: envVars("SPILL_THRESHOLD"),
			Usage: "in-flight requests on a replica above which a sticky turn spills elsewhere (0: auto = max(1, the replica's max_num_seqs/4))"},
		&cli.DurationFlag{Name: "admit-wait", EnvVars: envVars("ADMIT_WAIT"),
			Usage: "adaptive: longest a new conversation waits at the warden when no replica has KV room for it (0: auto, 5 mean turn times; negative, e.g. -1s: never wait)"},
		&cli.IntFlag{Name: "move-cooldown", EnvVars: envVars("MOVE_COOLDOWN"),
			Usage: "adaptive: turns a conversation moved off an overfull replica stays on its new one (0: auto = 3)"},
		&cli.StringFlag{Name: "subagents", Value: "own", EnvVars: envVars("SUBAGENTS"),
			Usage: "own: a subagent (Claude Code's x-claude-code-agent-id, a Codex child thread) is a conversation of its own, placed by load; parent: it goes where its parent's session is"},
		&cli.DurationFlag{Name: "ramp-up", Value: router.DefaultRampUp, EnvVars: envVars("RAMP_UP"),
			Usage: "how long a replica that comes back into rotation (restart, recovery, added) takes to reach its full share of new conversations (0: at once)"},
		&cli.Float64Flag{Name: "kv-fill", EnvVars: envVars("KV_FILL"),
			Usage: "adaptive: fraction of each replica's KV cache the conversations' working sets are planned into (0: auto = 1.0; below 1 keeps headroom, above 1 overcommits)"},
		&cli.StringSliceFlag{Name: "session-header", EnvVars: envVars("SESSION_HEADER"),
			Usage: "extra request header(s) that carry a session id (checked after the known agent headers)"},
		&cli.BoolFlag{Name: "keep-billing-header", EnvVars: envVars("KEEP_BILLING_HEADER"),
			Usage: "forward Claude Code's per-conversation billing system block (removed by default: it defeats prefix sharing)"},
		&cli.BoolFlag{Name: "strict-model", EnvVars: envVars("STRICT_MODEL"),
			Usage: "answer 404 (like vLLM) to a request for a model name other than the served one, instead of serving every name with the one model"},
		&cli.StringFlag{Name: "admin-token", EnvVars: envVars("ADMIN_TOKEN"),
			Usage: "bearer token for admin endpoints from non-loopback callers (policy switch, cache reset, replicas)"},
		&cli.StringFlag{Name: "api-key", EnvVars: envVars("API_KEY"),
			Usage: "require this key from clients on /v1/* (Authorization: Bearer KEY or x-api-key: KEY; 401 otherwise); never logged, not forwarded to engines"},
		&cli.StringFlag{Name: "max-body-bytes", Value: humanize.IBytes(proxy.DefaultMaxBodyBytes), EnvVars: envVars("MAX_BODY_BYTES"),
			Usage: "largest request body accepted (e.g. 32MiB); larger ones get 413 (agent conversations reach a few MB)"},
		&cli.DurationFlag{Name: "response-header-timeout", Value: proxy.DefaultResponseHeaderTimeout, EnvVars: envVars("RESPONSE_HEADER_TIMEOUT"),
			Usage: "how long to wait for an engine's response headers (a non-streaming answer sends them when complete); then 504 naming the replica"},
		&cli.DurationFlag{Name: "stream-idle-timeout", Value: proxy.DefaultStreamIdleTimeout, EnvVars: envVars("STREAM_IDLE_TIMEOUT"),
			Usage: "end a stream that sent its first token and then nothing for this long (a wedged engine): the client gets an error event, the replica leaves the rotation; longer than a preempted request's wait (negative: never)"},
		&cli.StringFlag{Name: "decision-log", EnvVars: envVars("DECISION_LOG"),
			Usage: "write one JSON line per routed request to this file (route reason, replica, warden queue wait, tokens, TTFB; docs/operations.md); off by default"},
		&cli.IntFlag{Name: "decision-log-max-mb", Value: router.DefaultDecisionLogMaxMB, EnvVars: envVars("DECISION_LOG_MAX_MB"),
			Usage: "rotate the --decision-log file at this size in megabytes, keeping three old files"},
		&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, EnvVars: envVars("DRAIN_TIMEOUT"),
			Usage: "on SIGINT/SIGTERM, how long in-flight requests may finish before the warden stops"},
	}
}

// serveFlags are `warden serve`'s flags: the engines', then the router's.
func serveFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, EnvVars: envVars("MODEL"), Required: true,
			Usage: "model to serve (Hugging Face id or local path), the positional argument of vllm serve"},
		&cli.StringFlag{Name: "served-model-name", EnvVars: envVars("SERVED_MODEL_NAME"),
			Usage: "the one model name every replica answers to (default: --model)"},
		&cli.IntFlag{Name: "dp", Value: 1, EnvVars: envVars("DP"),
			Usage: "data-parallel size: number of engine replicas, each with its own prefix cache"},
		&cli.IntFlag{Name: "tp", Value: 1, EnvVars: envVars("TP"),
			Usage: "tensor-parallel size: GPUs per replica (dp x tp GPUs are needed)"},
		&cli.StringFlag{Name: "gpus", EnvVars: envVars("GPUS"),
			Usage: "comma-separated GPU indices or UUIDs to use (default: all visible, honouring CUDA_VISIBLE_DEVICES)"},
		&cli.StringFlag{Name: "device", Value: "gpu", EnvVars: envVars("DEVICE"),
			Usage: "what vLLM runs on: gpu (NVIDIA; --tp GPUs per rank) or cpu (vLLM's CPU build; each rank on its own physical cores and NUMA node)"},
		&cli.StringFlag{Name: "cpu-kv-cache", Value: "auto", EnvVars: envVars("CPU_KV_CACHE"),
			Usage: "--device cpu: KV cache memory per rank (e.g. 4GiB), vLLM's --kv-cache-memory-bytes; auto: half the memory available after the engines' own (~3 GiB each), split over the ranks"},
		&cli.StringFlag{Name: "cpu-pin", Value: hostcpu.PinCores, EnvVars: envVars("CPU_PIN"),
			Usage: "--device cpu: cores (each rank's processes confined to its own cores) or threads (only vLLM's compute threads bound to them; its API server and engine core run on any core, as vLLM's own --data-parallel-size does)"},
		&cli.StringFlag{Name: "kv-offload", EnvVars: envVars("KV_OFFLOAD"), DefaultText: "auto on NVIDIA GPUs, off with --device cpu and --engine sim",
			Usage: "host-RAM KV tier per rank, vLLM's native KV offloading (evicted prefix blocks kept in host memory, " +
				"loaded back when a later prompt misses on the GPU): off, a size per rank (e.g. 32GiB), or auto: " +
				"4 x a rank's GPU KV cache within what the host can give (the memory available less what the OS " +
				"and the engines' own processes need, at most 90 % of /dev/shm's free space, split over the ranks; " +
				"the tier is pinned and cannot be swapped), and none under 2 x, which would hold what the GPU " +
				"holds; NVIDIA GPUs and --engine sim (vLLM's CPU platform cannot run it)"},
		&cli.StringFlag{Name: "tools", Value: engineplan.ToolsAuto, EnvVars: envVars("TOOLS"),
			Usage: "tool calling, which every coding agent needs: auto (--enable-auto-tool-choice with the " +
				"--tool-call-parser that fits the model, read from its files; docs/tools.md), off, or a vLLM parser name"},
		&cli.StringFlag{Name: "reasoning", Value: engineplan.ToolsAuto, EnvVars: envVars("REASONING"),
			Usage: "vLLM's --reasoning-parser: auto (the model's, when it thinks), off, or a vLLM parser name"},
		&cli.IntFlag{Name: "max-num-seqs", EnvVars: envVars("MAX_NUM_SEQS"),
			Usage: "vLLM --max-num-seqs per replica (0: vLLM's own default for the GPU); the spill threshold derives from it"},
		&cli.StringFlag{Name: "engine", Value: "vllm", EnvVars: envVars("ENGINE"),
			Usage: "engine to launch: vllm, or sim (the built-in simulator; no GPU needed)"},
		&cli.StringFlag{Name: "vllm", Value: "vllm", EnvVars: envVars("VLLM"),
			Usage: "path of the vllm executable"},
		&cli.StringFlag{Name: "image", EnvVars: envVars("IMAGE"),
			Usage: "run each rank's vLLM from this container image instead of a host install (e.g. vllm/vllm-openai:v0.32.0): " +
				"one container per rank with its GPUs, the host's Hugging Face cache and its port on 127.0.0.1 only (docs/container.md)"},
		&cli.StringFlag{Name: "container-runtime", EnvVars: envVars("CONTAINER_RUNTIME"), DefaultText: "docker, else podman, whichever is on PATH",
			Usage: "--image: the container runtime, docker or podman (a name on PATH or a path)"},
		&cli.StringFlag{Name: "log-dir", EnvVars: envVars("LOG_DIR"),
			Usage: "directory for per-rank engine logs (default: $XDG_STATE_HOME/warden/runs/<time>)"},
		&cli.DurationFlag{Name: "startup-timeout", Value: 20 * time.Minute, EnvVars: envVars("STARTUP_TIMEOUT"),
			Usage: "give up when a replica is not healthy after this long (large models load for minutes)"},
		&cli.DurationFlag{Name: "stop-grace", Value: 20 * time.Second, EnvVars: envVars("STOP_GRACE"),
			Usage: "after SIGTERM to an engine's process group, how long before SIGKILL"},
	}, routerFlags()...)
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
		Flags:  serveFlags(),
		Action: action(func(c *cli.Context) error { return serve.Main(c.Context, serveOptions(c), c.App.Writer) }),
	}
}

// routeFlags are `warden route`'s flags: the replicas', then the router's.
func routeFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringSliceFlag{Name: "replica", EnvVars: envVars("REPLICA"),
			Usage: "a running vLLM (or warden) server to route to: URL, or URL#max_num_seqs=N when the server does not say its own; repeat or separate with commas"},
		&cli.StringFlag{Name: "replicas-file", EnvVars: envVars("REPLICAS_FILE"),
			Usage: "file listing replicas, one URL[#max_num_seqs=N] per line (blank lines and lines starting with # skipped); re-read on SIGHUP"},
		&cli.IntFlag{Name: "max-num-seqs", Value: router.DefaultMaxNumSeqs, EnvVars: envVars("MAX_NUM_SEQS"),
			Usage: "max_num_seqs assumed for a replica without #max_num_seqs=N whose server does not say its own; the spill threshold derives from it"},
		&cli.StringFlag{Name: "served-model-name", EnvVars: envVars("SERVED_MODEL_NAME"),
			Usage: "the model name clients use (default: what the replicas answer on /v1/models at start; none answering: names pass through)"},
		&cli.StringFlag{Name: "state-file", EnvVars: envVars("STATE_FILE"),
			Usage: "where the session table is saved and reloaded, so conversations keep their replica across a restart (default: $XDG_STATE_HOME/warden/route-<port>.sessions.json; none: off)"},
		&cli.DurationFlag{Name: "state-interval", Value: 30 * time.Second, EnvVars: envVars("STATE_INTERVAL"),
			Usage: "how often the session table is saved while running (it is always saved on exit)"},
	}, routerFlags()...)
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
		Flags:  routeFlags(),
		Action: action(func(c *cli.Context) error { return serve.Route(c.Context, routeOptions(c), c.App.Writer) }),
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
		RampUp: c.Duration("ramp-up"), KVFill: c.Float64("kv-fill"), SessionHeaders: c.StringSlice("session-header"),
		KeepBillingHeader: c.Bool("keep-billing-header"), StrictModel: c.Bool("strict-model"),
		AdminToken: c.String("admin-token"), APIKey: c.String("api-key"), MaxBodyBytes: c.String("max-body-bytes"),
		ResponseHeaderTimeout: c.Duration("response-header-timeout"), StreamIdleTimeout: c.Duration("stream-idle-timeout"),
		DecisionLog:      c.String("decision-log"),
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
		Extra: c.Args().Slice(), Router: routerOptions(c), SimKVCache: sim.KVCacheBytes,
		Image: c.String("image"), ContainerRuntime: c.String("container-runtime"),
	}
}

// routeOptions reads `warden route`'s flags.
func routeOptions(c *cli.Context) serve.RouteOptions {
	return serve.RouteOptions{
		Replicas: c.StringSlice("replica"), ReplicasFile: c.String("replicas-file"), MaxNumSeqs: c.Int("max-num-seqs"),
		ServedName: c.String("served-model-name"), StateFile: c.String("state-file"),
		StateInterval: c.Duration("state-interval"), Router: routerOptions(c),
	}
}

package sim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/sim/model"
)

// Config is everything `warden sim serve` was told, from WARDEN_SIM_*
// environment variables first and then the argv (argv wins).
type Config struct {
	Model            string   // first positional or --model
	ServedNames      []string // --served-model-name (default: Model)
	Host             string   // --host (default 0.0.0.0, like vLLM)
	Port             int      // --port (default 8000)
	MaxNumSeqs       int      // --max-num-seqs (0: profile default)
	MaxBatchedTokens int      // --max-num-batched-tokens (default 2048)
	GPUMemUtil       float64  // --gpu-memory-utilization (default 0.92)
	BlockSize        int      // --block-size (default 16)
	MaxModelLen      int      // --max-model-len, human-readable (1k, 1K, 25.6k); 0: the model's context, else the KV capacity; -1 (auto): fit the KV cache
	PromptDetails    bool     // --enable-prompt-tokens-details
	ForceUsage       bool     // --enable-force-include-usage
	StreamInterval   int      // --stream-interval (default 1)
	TP               int      // --tensor-parallel-size, -tp: cards per replica (default 1)
	DP               int      // --data-parallel-size, -dp: engines behind the one server, vLLM's data parallelism (default 1)
	KVOffloadBackend string   // --kv-offloading-backend: native (default) or lmcache
	KVOffloadGiB     float64  // --kv-offloading-size, --sim-kv-offload-gib: host-RAM KV tier in GiB, whole engine (0: off)

	AutoToolChoice        bool   // --enable-auto-tool-choice
	ToolCallParser        string // --tool-call-parser NAME
	ReasoningParser       string // --reasoning-parser NAME (accepted; the sim generates no reasoning)
	ToolParserPlugin      string // --tool-parser-plugin PATH (may register any parser name)
	ReasoningParserPlugin string // --reasoning-parser-plugin PATH (same for reasoning parsers)
	ChatTemplate          string // --chat-template (accepted; the sim renders ChatML)
	KVEvents              string // --kv-events-config JSON: vLLM's KV-cache events (kvevents.go)

	// ModelLen is the context vLLM would derive for Model (its config.json, or
	// the sim's table of the models its profiles are of); 0 when not known.
	// Main sets it (ModelContext); it is not an argument.
	ModelLen       int
	ModelLenSource string // where ModelLen came from, for the start-up log

	Profile        string  // --sim-profile
	TimeScale      float64 // --sim-time-scale: simulated seconds per wall second
	LoadSeconds    float64 // --sim-load-seconds: simulated load time (wall seconds)
	KVTokens       int     // --sim-kv-tokens: KV capacity override (0: from profile)
	DecodeGBps     float64 // --sim-decode-gbps: effective decode bandwidth (0: profile)
	PrefillScale   float64 // --sim-prefill-scale: multiplies the profile's prefill cost (0: 1)
	Seed           uint64  // --sim-seed: varies generated text
	OutputTokens   int     // --sim-output-tokens: answer length instead of the drawn one (0: drawn)
	ReserveFullISL bool    // --sim-reserve-full-isl: full-sequence admission gate
	PrefixStats    string  // --sim-prefix-stats: admission | lookup | lookup-all
	Watermark      float64 // --sim-watermark: fraction of blocks kept free at admission
	OffloadFile    string  // --sim-offload-file: none, keep or unlink (the host KV tier's /dev/shm file)
	ShmDir         string  // --sim-shm-dir: where that file goes (default /dev/shm)

	DieAfter   int  // --sim-die-after N: exit 1 mid-stream on the Nth request (0: off)
	HangAfter  int  // --sim-hang-after N: stop answering after N requests (-1: off)
	HTTPError  int  // --sim-http-error CODE: answer generation requests with CODE (0: off)
	ForkChild  bool // --sim-fork-child: start a child that only a group kill removes
	LogUnknown []string

	// FailStartIf is --sim-fail-start-if FILE: while FILE exists, the
	// engine refuses to start, its first line the error (a crash loop on
	// demand; write the cause line of a real failure into it). Checked
	// when the arguments are read.
	FailStartIf string
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Host: "0.0.0.0", Port: 8000, MaxBatchedTokens: 2048, GPUMemUtil: 0.92,
		BlockSize: 16, StreamInterval: 1, TP: 1, DP: 1, Profile: model.DefaultProfile, TimeScale: 1, KVOffloadBackend: "native",
		ReserveFullISL: true, PrefixStats: model.StatsAdmission, HangAfter: -1,
	}
}

type flagKind int

const (
	kindValue flagKind = iota
	kindBool
	kindList // one or more values (vLLM nargs="+")
)

type flagSpec struct {
	kind flagKind
	env  string // WARDEN_SIM_* variable, "" for vLLM flags
	help string
	set  func(c *Config, v string) error
}

func intSetter(dst func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("not an integer: %q", v)
		}
		*dst(c) = n
		return nil
	}
}

func floatSetter(dst func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", v)
		}
		*dst(c) = f
		return nil
	}
}

// maxModelLenSetter parses --max-model-len as vLLM 0.32's
// human_readable_int_or_auto does (vllm/utils/argparse_utils.py): "auto" or
// "-1" is -1; NUMBER with k/m/g/t multiplies by a power of 1000 (decimals
// allowed, the product truncated), with K/M/G/T by a power of 1024 (whole
// numbers only); else a plain integer.
func maxModelLenSetter(c *Config, v string) error {
	n, err := parseHumanInt(v)
	if err != nil {
		return err
	}
	c.MaxModelLen = n
	return nil
}

func parseHumanInt(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "-1" || strings.EqualFold(v, "auto") {
		return -1, nil
	}
	if n := len(v); n >= 2 {
		num, suffix := v[:n-1], v[n-1]
		dec := map[byte]float64{'k': 1e3, 'm': 1e6, 'g': 1e9, 't': 1e12}
		bin := map[byte]int{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}
		if plainDecimal(num) {
			if m, ok := dec[suffix]; ok {
				f, _ := strconv.ParseFloat(num, 64)
				return int(f * m), nil
			}
			if m, ok := bin[suffix]; ok {
				i, err := strconv.Atoi(num)
				if err != nil {
					return 0, fmt.Errorf("Decimals are not allowed with binary suffixes like %c. Did you mean to use %s%c instead?",
						suffix, num, suffix+('a'-'A'))
				}
				return i * m, nil
			}
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("not an integer, a human-readable one (1k, 1K, 25.6k) or auto: %q", v)
	}
	return n, nil
}

// plainDecimal reports whether s is digits with at most one fractional part
// (the regex \d+(?:\.\d+)? of vLLM's parser).
func plainDecimal(s string) bool {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(p string) bool {
		if p == "" {
			return false
		}
		for i := 0; i < len(p); i++ {
			if p[i] < '0' || p[i] > '9' {
				return false
			}
		}
		return true
	}
	return digits(whole) && (!dot || digits(frac))
}

func boolSetter(dst func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			*dst(c) = true
			return nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("not a boolean: %q", v)
		}
		*dst(c) = b
		return nil
	}
}

func strSetter(dst func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *dst(c) = v; return nil }
}

// flags lists every flag the sim honours. Keys are names without "--".
var flags = map[string]flagSpec{
	"model":                        {kindValue, "", "model name (also the first positional)", strSetter(func(c *Config) *string { return &c.Model })},
	"host":                         {kindValue, "", "address to listen on (default 0.0.0.0)", strSetter(func(c *Config) *string { return &c.Host })},
	"port":                         {kindValue, "", "port to listen on (default 8000)", intSetter(func(c *Config) *int { return &c.Port })},
	"max-num-seqs":                 {kindValue, "", "most running sequences (default: the profile's, 32)", intSetter(func(c *Config) *int { return &c.MaxNumSeqs })},
	"max-num-batched-tokens":       {kindValue, "", "per-step token budget, chunked prefill (default 2048)", intSetter(func(c *Config) *int { return &c.MaxBatchedTokens })},
	"gpu-memory-utilization":       {kindValue, "", "fraction of GPU memory for weights + KV; sizes the KV cache (default 0.92)", floatSetter(func(c *Config) *float64 { return &c.GPUMemUtil })},
	"block-size":                   {kindValue, "", "tokens per KV block (default 16)", intSetter(func(c *Config) *int { return &c.BlockSize })},
	"max-model-len":                {kindValue, "", "longest sequence, also 1k (1000), 1K (1024), 25.6k; auto or -1: the longest the KV cache holds (default: the model's context when known, refused if the KV cache cannot hold one such sequence; else the KV capacity minus the null block)", maxModelLenSetter},
	"enable-auto-tool-choice":      {kindBool, "", "let the model choose tools (tool_choice auto); needs --tool-call-parser", boolSetter(func(c *Config) *bool { return &c.AutoToolChoice })},
	"tool-call-parser":             {kindValue, "", "tool call parser, one of vLLM 0.32's names; with --enable-auto-tool-choice, named and required tool choices return tool calls", strSetter(func(c *Config) *string { return &c.ToolCallParser })},
	"reasoning-parser":             {kindValue, "", "reasoning parser, one of vLLM 0.32's names (checked, no other effect)", strSetter(func(c *Config) *string { return &c.ReasoningParser })},
	"tool-parser-plugin":           {kindValue, "", "tool parser plugin file (accepted; any --tool-call-parser name is then taken as registered by it)", strSetter(func(c *Config) *string { return &c.ToolParserPlugin })},
	"reasoning-parser-plugin":      {kindValue, "", "reasoning parser plugin file (accepted; any --reasoning-parser name is then taken as registered by it)", strSetter(func(c *Config) *string { return &c.ReasoningParserPlugin })},
	"chat-template":                {kindValue, "", "chat template file or string (accepted; the sim renders ChatML)", strSetter(func(c *Config) *string { return &c.ChatTemplate })},
	"stream-interval":              {kindValue, "", "tokens per streamed flush; the first token is sent at once (default 1)", intSetter(func(c *Config) *int { return &c.StreamInterval })},
	"enable-prompt-tokens-details": {kindBool, "", "report cached_tokens in usage", boolSetter(func(c *Config) *bool { return &c.PromptDetails })},
	"enable-force-include-usage":   {kindBool, "", "always send a streaming usage chunk", boolSetter(func(c *Config) *bool { return &c.ForceUsage })},
	"tensor-parallel-size":         {kindValue, "", "cards per replica, also -tp: KV capacity from T cards, weight read and compute split T ways, two all-reduces a layer over the profile's link (default 1)", intSetter(func(c *Config) *int { return &c.TP })},
	"data-parallel-size":           {kindValue, "", "engines behind the one server, also -dp: vLLM's data parallelism, each engine with its own KV cache, prefix cache and scheduler (the other flags apply per engine); a request goes to the engine its X-data-parallel-rank header names (chat completions, completions, Messages; Responses ignore it), else to the one vLLM's balancer picks; metrics labelled engine=\"0\"..\"N-1\" (default 1)", intSetter(func(c *Config) *int { return &c.DP })},
	"kv-events-config":             {kindValue, "", "KV-cache events as vLLM publishes them, JSON of KVEventsConfig: enable_kv_cache_events, publisher (zmq|null), endpoint (tcp://*:5557), replay_endpoint, buffer_steps, hwm, max_queue_size, topic; each data-parallel engine on the ports + its rank (docs/kv-events.md)", strSetter(func(c *Config) *string { return &c.KVEvents })},
	"served-model-name":            {kindList, "", "names the model answers to, one or more (default: MODEL)", nil},
	"kv-offloading-backend":        {kindValue, "", "KV offloading backend: native (vLLM's CPU offloading, simulated; the default) or lmcache (refused); takes effect with --kv-offloading-size", strSetter(func(c *Config) *string { return &c.KVOffloadBackend })},
	"kv-offloading-size":           {kindValue, "", "host-RAM KV tier in GiB for the whole engine (summed over its TP ranks), vLLM's native offloading: prompt blocks stored as computed, LRU, loaded back on a GPU miss (default: off)", floatSetter(func(c *Config) *float64 { return &c.KVOffloadGiB })},

	"sim-profile":          {kindValue, "WARDEN_SIM_PROFILE", "hardware profile (default " + model.DefaultProfile + "; " + model.ReferenceProfile + " is fitted to the reference measurement, " + model.ReferenceProfileV1 + " its first fit, " + model.CPUTinyProfile + " the tiny test model on vLLM's CPU build)", strSetter(func(c *Config) *string { return &c.Profile })},
	"sim-time-scale":       {kindValue, "WARDEN_SIM_TIME_SCALE", "simulated seconds per wall second (default 1)", floatSetter(func(c *Config) *float64 { return &c.TimeScale })},
	"sim-load-seconds":     {kindValue, "WARDEN_SIM_LOAD_SECONDS", "wall seconds of simulated loading before the port opens (default 0)", floatSetter(func(c *Config) *float64 { return &c.LoadSeconds })},
	"sim-kv-tokens":        {kindValue, "WARDEN_SIM_KV_TOKENS", "KV cache capacity in tokens (overrides the profile)", intSetter(func(c *Config) *int { return &c.KVTokens })},
	"sim-decode-gbps":      {kindValue, "WARDEN_SIM_DECODE_GBPS", "effective decode memory bandwidth in GB/s (calibration knob)", floatSetter(func(c *Config) *float64 { return &c.DecodeGBps })},
	"sim-prefill-scale":    {kindValue, "WARDEN_SIM_PREFILL_SCALE", "multiply the profile's per-token prefill cost (calibration knob; 2 = half-rate tensor cores)", floatSetter(func(c *Config) *float64 { return &c.PrefillScale })},
	"sim-seed":             {kindValue, "WARDEN_SIM_SEED", "seed for generated text (default 0)", func(c *Config, v string) error { n, err := strconv.ParseUint(v, 10, 64); c.Seed = n; return err }},
	"sim-output-tokens":    {kindValue, "WARDEN_SIM_OUTPUT_TOKENS", "tokens generated per request within max_tokens and the context, instead of a length drawn from coding agents' answers (0: drawn; ignore_eos requests always get max_tokens)", intSetter(func(c *Config) *int { return &c.OutputTokens })},
	"sim-reserve-full-isl": {kindBool, "WARDEN_SIM_RESERVE_FULL_ISL", "admit only when the whole prompt fits, vLLM >= 0.20 (default true)", boolSetter(func(c *Config) *bool { return &c.ReserveFullISL })},
	"sim-prefix-stats":     {kindValue, "WARDEN_SIM_PREFIX_STATS", "when prefix queries count: admission (0.26), lookup (0.11-0.25), lookup-all (0.10)", strSetter(func(c *Config) *string { return &c.PrefixStats })},
	"sim-kv-offload-gib": {kindValue, "WARDEN_SIM_KV_OFFLOAD_GIB", "shorthand for --kv-offloading-backend native --kv-offloading-size G", func(c *Config, v string) error {
		if err := floatSetter(func(c *Config) *float64 { return &c.KVOffloadGiB })(c, v); err != nil {
			return err
		}
		c.KVOffloadBackend = "native"
		return nil
	}},
	"sim-offload-file": {kindValue, "WARDEN_SIM_OFFLOAD_FILE", "with a host KV tier, a file in --sim-shm-dir as vLLM's /dev/shm/vllm_offload_<id>.mmap: none (default), keep (vLLM 0.27-0.28: mapped until a clean exit, left behind when killed) or unlink (0.29+: unlinked once mapped)", strSetter(func(c *Config) *string { return &c.OffloadFile })},
	"sim-shm-dir":      {kindValue, "WARDEN_SIM_SHM_DIR", "folder of the --sim-offload-file (default /dev/shm)", strSetter(func(c *Config) *string { return &c.ShmDir })},
	"sim-watermark":    {kindValue, "WARDEN_SIM_WATERMARK", "fraction of blocks kept free when admitting (0: off)", floatSetter(func(c *Config) *float64 { return &c.Watermark })},
	"sim-die-after":    {kindValue, "WARDEN_SIM_DIE_AFTER", "exit 1 mid-stream on the Nth generation request (0: off)", intSetter(func(c *Config) *int { return &c.DieAfter })},
	"sim-hang-after":   {kindValue, "WARDEN_SIM_HANG_AFTER", "after N generation requests answer nothing, /health included (-1: off)", intSetter(func(c *Config) *int { return &c.HangAfter })},
	"sim-http-error":   {kindValue, "WARDEN_SIM_HTTP_ERROR", "answer every generation request with this status (0: off)", intSetter(func(c *Config) *int { return &c.HTTPError })},
	"sim-fork-child":   {kindBool, "WARDEN_SIM_FORK_CHILD", "start a child process (like EngineCore) that only a group kill removes", boolSetter(func(c *Config) *bool { return &c.ForkChild })},

	"sim-fail-start-if": {kindValue, "WARDEN_SIM_FAIL_START_IF", "exit 1 at start while FILE exists, its first line printed as the error (e.g. a vLLM cause line): a crash loop on demand", strSetter(func(c *Config) *string { return &c.FailStartIf })},
}

// ParseArgs reads the environment (through getenv) and then args, the argv
// after `serve`: MODEL [flags]. Flags take `--flag value` or `--flag=value`;
// boolean vLLM flags take no separate value. Unknown flags are accepted
// (`--x`, `--x=v`, `--x v` where v does not start with "--") and recorded in
// LogUnknown.
func ParseArgs(args []string, getenv func(string) string) (Config, error) {
	c := DefaultConfig()
	for _, name := range sortedFlagNames() {
		f := flags[name]
		if v := getenv(f.env); f.env != "" && v != "" {
			if err := f.set(&c, v); err != nil {
				return c, fmt.Errorf("%s: %w", f.env, err)
			}
		}
	}
	for i := 0; i < len(args); i++ {
		used, err := c.applyArg(args[i], args[i+1:])
		if err != nil {
			return c, err
		}
		i += used
	}
	if n, _ := strconv.Atoi(getenv("VLLM_USE_SIMPLE_KV_OFFLOAD")); n != 0 && c.KVOffloadGiB > 0 {
		return c, errors.Join(c.validate(), errors.New("VLLM_USE_SIMPLE_KV_OFFLOAD=1 makes vLLM use its SimpleCPUOffloadConnector, "+
			"which the simulator does not model (it models the default OffloadingConnector); unset it"))
	}
	return c, c.validate()
}

// applyArg applies one argv token a; rest are the tokens after it. It
// returns how many of rest it consumed as values.
func (c *Config) applyArg(a string, rest []string) (int, error) {
	if a == "--" {
		return 0, nil
	}
	if a == "-tp" || strings.HasPrefix(a, "-tp=") { // vLLM's alias of --tensor-parallel-size
		a = "--tensor-parallel-size" + a[len("-tp"):]
	}
	if a == "-dp" || strings.HasPrefix(a, "-dp=") { // vLLM's alias of --data-parallel-size
		a = "--data-parallel-size" + a[len("-dp"):]
	}
	if !strings.HasPrefix(a, "--") {
		if c.Model == "" {
			c.Model = a
		} else {
			c.LogUnknown = append(c.LogUnknown, a)
		}
		return 0, nil
	}
	name, val, hasVal := strings.Cut(a[2:], "=")
	spec, known := flags[name]
	nextIsValue := len(rest) > 0 && !strings.HasPrefix(rest[0], "--")
	switch {
	case !known:
		if !hasVal && nextIsValue {
			c.LogUnknown = append(c.LogUnknown, a+" "+rest[0])
			return 1, nil
		}
		c.LogUnknown = append(c.LogUnknown, a)
		return 0, nil
	case spec.kind == kindList:
		if hasVal {
			c.ServedNames = append(c.ServedNames, val)
			return 0, nil
		}
		n := 0
		for n < len(rest) && !strings.HasPrefix(rest[n], "--") {
			c.ServedNames = append(c.ServedNames, rest[n])
			n++
		}
		if n == 0 {
			return 0, fmt.Errorf("--%s needs a value", name)
		}
		return n, nil
	case spec.kind == kindBool:
		if err := spec.set(c, val); err != nil {
			return 0, fmt.Errorf("--%s: %w", name, err)
		}
		return 0, nil
	}
	used := 0
	if !hasVal {
		if len(rest) == 0 {
			return 0, fmt.Errorf("--%s needs a value", name)
		}
		val, used = rest[0], 1
	}
	if err := spec.set(c, val); err != nil {
		return 0, fmt.Errorf("--%s: %w", name, err)
	}
	return used, nil
}

// validate rejects values the engine cannot run with.
func (c *Config) validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("missing MODEL (first positional argument or --model)"))
	}
	if len(c.ServedNames) == 0 && c.Model != "" {
		c.ServedNames = []string{c.Model}
	}
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Port >= 0 && c.Port < 65536, "--port %d out of range", c.Port)
	check(c.MaxNumSeqs >= 0, "--max-num-seqs must be positive, got %d", c.MaxNumSeqs)
	check(c.MaxBatchedTokens > 0, "--max-num-batched-tokens must be positive, got %d", c.MaxBatchedTokens)
	check(c.GPUMemUtil > 0 && c.GPUMemUtil <= 1, "--gpu-memory-utilization must be in (0, 1], got %v", c.GPUMemUtil)
	check(c.BlockSize > 0 && c.BlockSize <= 1024, "--block-size must be in 1..1024, got %d", c.BlockSize)
	check(c.MaxModelLen >= -1, "--max-model-len must be positive, -1 or auto, got %d", c.MaxModelLen)
	check(c.DP >= 1, "--data-parallel-size must be at least 1, got %d", c.DP)
	check(c.StreamInterval > 0, "--stream-interval must be positive, got %d", c.StreamInterval)
	check(c.TimeScale > 0, "--sim-time-scale must be positive, got %v", c.TimeScale)
	check(c.LoadSeconds >= 0, "--sim-load-seconds must not be negative, got %v", c.LoadSeconds)
	check(c.KVTokens >= 0, "--sim-kv-tokens must not be negative, got %d", c.KVTokens)
	check(c.DecodeGBps >= 0, "--sim-decode-gbps must not be negative, got %v", c.DecodeGBps)
	check(c.PrefillScale >= 0, "--sim-prefill-scale must not be negative, got %v", c.PrefillScale)
	check(c.OutputTokens >= 0, "--sim-output-tokens must not be negative, got %d", c.OutputTokens)
	check(c.OffloadFile == "" || c.OffloadFile == "none" || c.OffloadFile == "keep" || c.OffloadFile == "unlink",
		"--sim-offload-file must be none, keep or unlink, got %q", c.OffloadFile)
	check(c.Watermark >= 0 && c.Watermark < 1, "--sim-watermark must be in [0, 1), got %v", c.Watermark)
	check(c.PrefixStats == model.StatsAdmission || c.PrefixStats == model.StatsLookup || c.PrefixStats == model.StatsLookupAll,
		"--sim-prefix-stats must be admission, lookup or lookup-all, got %q", c.PrefixStats)
	check(c.HTTPError == 0 || (c.HTTPError >= 400 && c.HTTPError < 600), "--sim-http-error must be 4xx or 5xx, got %d", c.HTTPError)
	p, ok := model.Profiles[c.Profile]
	if !ok {
		errs = append(errs, fmt.Errorf("unknown --sim-profile %q (known: %s)", c.Profile, strings.Join(model.ProfileNames(), ", ")))
	} else if err := p.CheckTP(c.TP); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.checkOffload(p, ok), c.startFault())
	return errors.Join(errs...)
}

// startFault is --sim-fail-start-if: FILE's first line as the error while
// FILE exists, nil otherwise.
func (c *Config) startFault() error {
	if c.FailStartIf == "" {
		return nil
	}
	b, err := os.ReadFile(c.FailStartIf)
	if err != nil {
		return nil // absent (or unreadable): start
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if line == "" {
		line = "RuntimeError: failing at start while " + c.FailStartIf + " exists (--sim-fail-start-if)"
	}
	return errors.New(line)
}

// checkOffload validates the host-RAM KV tier flags. vLLM accepts
// --kv-offloading-backend native or lmcache (argparse choices) and turns
// offloading on only when --kv-offloading-size is set
// (config/vllm.py _post_init_kv_transfer_config).
func (c *Config) checkOffload(p model.Profile, known bool) error {
	switch c.KVOffloadBackend {
	case "native":
	case "lmcache":
		if c.KVOffloadGiB != 0 {
			return errors.New("--kv-offloading-backend lmcache: the simulator models only vLLM's native CPU offloading " +
				"(OffloadingConnector); LMCache keeps its KV in its own server process, which it does not simulate. " +
				"Use --kv-offloading-backend native")
		}
	default:
		return fmt.Errorf("argument --kv-offloading-backend: invalid choice: '%s' (choose from 'native', 'lmcache')", c.KVOffloadBackend)
	}
	switch {
	case c.KVOffloadGiB == 0:
		return nil
	case c.KVOffloadGiB < 0 || math.IsNaN(c.KVOffloadGiB) || math.IsInf(c.KVOffloadGiB, 0):
		return fmt.Errorf("--kv-offloading-size must be a positive number of GiB, got %v", c.KVOffloadGiB)
	case !known:
		return nil
	}
	p = p.WithTP(max(1, c.TP))
	if p.HostLinkGBps <= 0 {
		return fmt.Errorf("--kv-offloading-size: profile %s has no host link; vLLM's CPU offloading runs on CUDA and XPU GPUs only", p.Name)
	}
	if h := model.HostTier(c.KVOffloadGiB, p, c.BlockSize); c.BlockSize > 0 && h.Blocks < 1 {
		return fmt.Errorf("--kv-offloading-size %v GiB holds no KV block (%.0f bytes of %d tokens)", c.KVOffloadGiB, h.BlockBytes, c.BlockSize)
	}
	return nil
}

// profile is the named profile with the calibration knobs of cfg applied
// (--sim-decode-gbps, --sim-prefill-scale) at its tensor-parallel size
// (--tensor-parallel-size): the one the engine times its steps with.
func (c Config) profile() model.Profile {
	p := model.Profiles[c.Profile]
	if c.DecodeGBps > 0 {
		p.DecodeGBps = c.DecodeGBps
	}
	if c.PrefillScale > 0 {
		p.A *= c.PrefillScale
		p.B *= c.PrefillScale
	}
	if c.TP > 1 {
		p.TP = c.TP
	}
	return p
}

// FlagHelp returns one line per flag for `warden sim serve --help`.
func FlagHelp() string {
	var b strings.Builder
	for _, name := range sortedFlagNames() {
		f := flags[name]
		env := ""
		if f.env != "" {
			env = " [$" + f.env + "]"
		}
		fmt.Fprintf(&b, "  --%-30s %s%s\n", name, f.help, env)
	}
	return b.String()
}

func sortedFlagNames() []string {
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

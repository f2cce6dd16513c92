package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/sim/model"
	"github.com/prometheus/client_golang/prometheus"
)

// Main runs `warden sim serve` with args (MODEL [vLLM flags]): it "loads",
// opens the port, serves until ctx ends, then exits quickly (like vLLM on
// SIGTERM: nothing in flight is finished). Logs go to stderr as vLLM's do.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := ParseArgs(args, os.Getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	for _, u := range cfg.LogUnknown {
		log.Info("accepted vLLM argument (no effect in the sim)", "arg", u)
	}
	if err := cfg.checkParsers(); err != nil {
		fmt.Fprintln(stderr, err.(*pyError).line())
		return err
	}
	cfg.ModelLen, cfg.ModelLenSource = ModelContext(cfg.Model, os.Getenv)
	s, err := newServer(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "ValueError: %v\n", err)
		return err
	}
	if err := s.startKVEvents(log); err != nil {
		fmt.Fprintf(stderr, "ValueError: %v\n", err)
		return err
	}
	defer s.closeKVEvents()
	if !s.load(ctx) {
		return nil
	}
	if cfg.KVOffloadGiB > 0 && cfg.OffloadFile != "" && cfg.OffloadFile != "none" {
		path, stop, err := offloadFile(cfg.ShmDir, cfg.OffloadFile, int64(cfg.KVOffloadGiB*model.GiB))
		if err != nil {
			return err
		}
		defer stop()
		log.Info("host KV tier file", "path", path, "mode", cfg.OffloadFile)
	}
	if cfg.ForkChild {
		stop, err := s.forkChild()
		if err != nil {
			return err
		}
		defer stop()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	engCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, eng := range s.engs {
		go eng.Run(engCtx)
	}
	if s.bal != nil {
		go s.bal.run(engCtx)
	}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("Starting vLLM server on http://" + ln.Addr().String()) // vLLM 0.32's line
	log.Info("Application startup complete.")
	select {
	case <-ctx.Done():
		log.Info("Shutting down FastAPI HTTP server.")
		_ = srv.Close()
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	}
}

// newServer sizes the KV cache from the profile (or --sim-kv-tokens) and
// builds the engine, scheduler and metrics.
func newServer(cfg Config, log *slog.Logger) (*server, error) {
	prof := cfg.profile()
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = prof.DefaultMaxNumSeqs
	}
	kvTokens := cfg.KVTokens
	if kvTokens == 0 {
		kvTokens = prof.KVTokens(cfg.GPUMemUtil, cfg.MaxNumSeqs, cfg.BlockSize)
	}
	numBlocks := kvTokens / cfg.BlockSize
	if numBlocks < 2 {
		return nil, fmt.Errorf("No available memory for the cache blocks (KV capacity %d tokens). Try increasing `gpu_memory_utilization` when initializing the engine.", kvTokens)
	}
	kvTokens = numBlocks * cfg.BlockSize
	usable := (numBlocks - 1) * cfg.BlockSize
	maxLen, lenLines, err := resolveMaxLen(cfg, prof, kvTokens)
	if lenLines.source != "" { // vLLM logs it as it reads the model's config, before the engine starts (or fails)
		log.Info(lenLines.using, "model_context", cfg.ModelLen, "from", lenLines.source)
	} else {
		log.Info(lenLines.using)
	}
	if err != nil {
		return nil, err
	}
	maxLen = min(maxLen, usable)
	sc := model.SchedConfig{
		MaxNumSeqs: cfg.MaxNumSeqs, MaxBatchedTokens: cfg.MaxBatchedTokens, MaxModelLen: maxLen,
		BlockSize: cfg.BlockSize, ReserveFullISL: cfg.ReserveFullISL, PrefixStats: cfg.PrefixStats,
		WatermarkBlocks: int(cfg.Watermark * float64(numBlocks)),
		Host:            model.HostTier(cfg.KVOffloadGiB, prof, cfg.BlockSize),
	}
	s := &server{cfg: cfg, prof: prof, log: log, maxLen: maxLen, kvTokens: kvTokens, numBlocks: numBlocks, host: sc.Host, engineID: uuid4(),
		lenLines: lenLines}
	// One engine per data-parallel rank, each with its own scheduler, KV
	// cache and prefix cache, sized by the same flags (as vLLM's are).
	dp := max(cfg.DP, 1)
	var cacheLabels []prometheus.Labels
	for i := range dp {
		cacheLabels = append(cacheLabels, cacheConfigLabels(cfg, numBlocks, i))
	}
	s.met = newMetrics(cfg.ServedNames[0], cfg.TimeScale, cacheLabels)
	if dp > 1 {
		s.bal = newBalancer(dp, cfg.TimeScale)
	}
	for i := range dp {
		sched := model.NewScheduler(sc, model.NewBlockPool(numBlocks))
		if i == 0 && sched.HasHostTier() {
			s.met.enableHost()
		}
		elog := log
		if dp > 1 {
			elog = log.With("engine", i)
		}
		eng := model.NewEngine(model.EngineConfig{BlockSize: cfg.BlockSize, StreamInterval: cfg.StreamInterval, TimeScale: cfg.TimeScale, Seed: cfg.Seed},
			prof, sched, elog)
		eng.OnStep = func(snap model.Snapshot) { s.met.publish(i, snap) }
		if s.bal != nil {
			eng.OnStep = func(snap model.Snapshot) { s.met.publish(i, snap); s.bal.report(i, snap) }
		}
		eng.OnTTFT = s.met.ttft[i].Observe
		label := strconv.Itoa(i)
		eng.OnDone = func(reason string) { s.met.success.WithLabelValues(label, reason).Inc() }
		s.met.publish(i, eng.Snapshot())
		s.engs = append(s.engs, eng)
	}
	s.eng = s.engs[0]
	return s, nil
}

// maxLenLines are the start-up lines about max_model_len: the one newServer
// logs ("Using max model len", or why the sim falls back to the KV
// capacity) and vLLM's auto-fit line, logged with the KV cache size.
type maxLenLines struct {
	using, autoFit string
	source         string // where the model's context came from, when it was used
}

// resolveMaxLen is the max_model_len the engine is built with, before the
// null block is taken off: --max-model-len N, refused as vLLM refuses it
// when one sequence of N does not fit kvTokens; without it the model's
// context (cfg.ModelLen), refused the same way; -1 (auto) the model's
// context or, when the KV cache holds less, kvTokens, vLLM's
// _auto_fit_max_model_len (v1/core/kv_cache_utils.py, 0.32.0), which finds
// the longest length whose blocks fit the KV memory: the whole blocks of
// it, kvTokens. A model whose context the sim does not know gets kvTokens
// in both cases, as before.
func resolveMaxLen(cfg Config, prof model.Profile, kvTokens int) (int, maxLenLines, error) {
	lines := maxLenLines{source: cfg.ModelLenSource}
	if cfg.ModelLen == 0 || cfg.MaxModelLen > 0 {
		lines.source = ""
	}
	bpt := prof.CardKVBytesPerToken()
	kvMem := fmt.Sprintf("%s GiB %s", formatGiB(float64(kvTokens)*bpt), prof.KVDevice())
	switch n := cfg.MaxModelLen; {
	case n > 0:
		lines.using = fmt.Sprintf("Using max model len %d", n)
		if n > kvTokens {
			return 0, lines, model.KVCapacityError(n, kvTokens, bpt)
		}
		return n, lines, nil
	case n == -1 && cfg.ModelLen > 0:
		lines.using = fmt.Sprintf("Using max model len %d", cfg.ModelLen)
		if cfg.ModelLen <= kvTokens {
			lines.autoFit = fmt.Sprintf("Auto-fit max_model_len: full model context length %d fits in available KV cache memory (%s)", cfg.ModelLen, kvMem)
			return cfg.ModelLen, lines, nil
		}
		lines.autoFit = fmt.Sprintf("Auto-fit max_model_len: reduced from %d to %d to fit in available KV cache memory (%s)", cfg.ModelLen, kvTokens, kvMem)
		return kvTokens, lines, nil
	case n == -1:
		lines.using = unknownContext(cfg.Model)
		lines.autoFit = fmt.Sprintf("Auto-fit max_model_len: %d, the KV capacity (%s): the simulator does not know the model's context", kvTokens, kvMem)
		return kvTokens, lines, nil
	case cfg.ModelLen > 0:
		lines.using = fmt.Sprintf("Using max model len %d", cfg.ModelLen)
		if cfg.ModelLen > kvTokens {
			return 0, lines, model.KVCapacityError(cfg.ModelLen, kvTokens, bpt)
		}
		return cfg.ModelLen, lines, nil
	}
	lines.using = unknownContext(cfg.Model) + "; max_model_len defaults to the KV capacity"
	return kvTokens, lines, nil
}

func unknownContext(name string) string {
	return "The simulator does not know the context of " + name +
		" (no config.json in a local directory or the Hugging Face cache, not in its table)"
}

// formatGiB is vLLM's format_gib: bytes in GiB rounded to 2 decimals, as
// Python prints a float (6.3, 10.07, 6.0).
func formatGiB(bytes float64) string {
	s := strconv.FormatFloat(math.Round(bytes/model.GiB*100)/100, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// load prints vLLM-like start-up lines over --sim-load-seconds of wall
// time (the port stays closed meanwhile). It returns false if ctx ended.
func (s *server) load(ctx context.Context) bool {
	cfg, log := s.cfg, s.log
	attrs := []any{"model", cfg.Model, "profile", s.prof.Name, "tensor_parallel_size", s.prof.TPSize(),
		"max_num_seqs", cfg.MaxNumSeqs, "max_num_batched_tokens", cfg.MaxBatchedTokens, "time_scale", cfg.TimeScale}
	if s.prof.TPSize() > 1 {
		attrs = append(attrs, "link", s.prof.Link)
	}
	if n := len(s.engs); n > 1 {
		attrs = append(attrs, "data_parallel_size", n)
	}
	log.Info("Initializing a V1 LLM engine ("+Version+")", attrs...)
	log.Info("Loading weights...")
	if cfg.LoadSeconds > 0 {
		const steps = 4
		tick := time.NewTicker(time.Duration(cfg.LoadSeconds / steps * float64(time.Second)))
		defer tick.Stop()
		for i := 1; i <= steps; i++ {
			select {
			case <-ctx.Done():
				return false
			case <-tick.C:
			}
			log.Info(fmt.Sprintf("Loading safetensors checkpoint shards: %d%% Completed", i*100/steps))
		}
	}
	// Per card, as vLLM's workers log them: one line per TP rank.
	weights := fmt.Sprintf("Model loading took %.4f GiB", s.prof.CardWeightsGiB())
	kvMem := fmt.Sprintf("Available KV cache memory: %.2f GiB", float64(s.kvTokens)*s.prof.CardKVBytesPerToken()/model.GiB)
	if t := s.prof.TPSize(); t == 1 {
		log.Info(weights)
		log.Info(kvMem)
	} else {
		for r := range t {
			log.Info(weights, "worker", fmt.Sprintf("TP%d", r))
		}
		for r := range t {
			log.Info(kvMem, "worker", fmt.Sprintf("TP%d", r))
		}
	}
	if l := s.lenLines.autoFit; l != "" {
		log.Info(l)
	}
	log.Info(fmt.Sprintf("GPU KV cache size: %s tokens", thousands(s.kvTokens)))
	log.Info(fmt.Sprintf("Maximum concurrency for %s tokens per request: %.2fx", thousands(s.maxLen), float64(s.kvTokens)/float64(s.maxLen)))
	if h := s.host; h.Blocks > 0 {
		// vLLM's own lines (kv_connector/factory.py, v1/kv_offload/factory.py),
		// then the sim's: vLLM logs the tier's size only in GB of its mmap file.
		log.Info("Creating v1 connector with name: OffloadingConnector and engine_id: " + s.engineID)
		log.Info("Creating offloading spec with name: CPUOffloadingSpec")
		log.Info(fmt.Sprintf("CPU KV offload cache size: %s tokens", thousands(h.Blocks*cfg.BlockSize)),
			"blocks", h.Blocks, "gib", cfg.KVOffloadGiB, "host_link", s.prof.HostLink,
			"host_link_gbps", s.prof.HostLinkGBps, "load_ms_per_1k_tokens", fmt.Sprintf("%.2f", 1e6*h.BlockSeconds/float64(cfg.BlockSize)))
	}
	return ctx.Err() == nil
}

// thousands formats n with comma separators, as vLLM's log lines do.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// uuid4 is a random UUID in its text form, as vLLM names its engines.
func uuid4() string {
	a, b := rand.Uint64(), rand.Uint64()
	a = a&^0xf000 | 0x4000     // version 4
	b = b&^(0xc<<60) | 0x8<<60 // variant 10
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}

// KVCacheBytes is the GPU KV cache, in bytes, of the engine that `warden sim
// serve` would start with args (MODEL and its flags, as the warden passes
// them): the KV tokens newServer sizes times the profile's KV bytes a token.
// The warden sizes a host KV tier from it before the engines start, as a
// real GPU engine's would be estimated (engineplan.PlanOffload).
func KVCacheBytes(args []string, getenv func(string) string) (uint64, error) {
	cfg, err := ParseArgs(args, getenv)
	if err != nil {
		return 0, err
	}
	prof := cfg.profile()
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = prof.DefaultMaxNumSeqs
	}
	tokens := cfg.KVTokens
	if tokens == 0 {
		tokens = prof.KVTokens(cfg.GPUMemUtil, cfg.MaxNumSeqs, cfg.BlockSize)
	}
	return uint64(float64(tokens) * prof.KVBytesPerToken), nil
}

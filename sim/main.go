package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
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
	s, err := newServer(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "ValueError: %v\n", err)
		return err
	}
	if !s.load(ctx) {
		return nil
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
	go s.eng.Run(engCtx)
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
	maxLen := cfg.MaxModelLen
	if maxLen == 0 {
		maxLen = usable
	} else if maxLen > kvTokens {
		return nil, kvCapacityError(maxLen, kvTokens, prof.CardKVBytesPerToken())
	}
	maxLen = min(maxLen, usable)
	sc := SchedConfig{
		MaxNumSeqs: cfg.MaxNumSeqs, MaxBatchedTokens: cfg.MaxBatchedTokens, MaxModelLen: maxLen,
		BlockSize: cfg.BlockSize, ReserveFullISL: cfg.ReserveFullISL, PrefixStats: cfg.PrefixStats,
		WatermarkBlocks: int(cfg.Watermark * float64(numBlocks)),
		Host:            HostTier(cfg.KVOffloadGiB, prof, cfg.BlockSize),
	}
	sched := NewScheduler(sc, NewBlockPool(numBlocks))
	s := &server{cfg: cfg, prof: prof, log: log, maxLen: maxLen, kvTokens: kvTokens, numBlocks: numBlocks, host: sc.Host, engineID: uuid4()}
	s.met = newMetrics(cfg.ServedNames[0], cacheConfigLabels(cfg, numBlocks))
	if sched.HasHostTier() {
		s.met.enableHost()
	}
	s.eng = NewEngine(cfg, prof, sched, log)
	s.eng.onStep = s.met.publish
	s.eng.onTTFT = s.met.ttft.Observe
	s.eng.onDone = func(reason string) { s.met.success.WithLabelValues(reason).Inc() }
	s.met.publish(s.eng.Snapshot())
	return s, nil
}

// load prints vLLM-like start-up lines over --sim-load-seconds of wall
// time (the port stays closed meanwhile). It returns false if ctx ended.
func (s *server) load(ctx context.Context) bool {
	cfg, log := s.cfg, s.log
	attrs := []any{"model", cfg.Model, "profile", s.prof.Name, "tensor_parallel_size", s.prof.tp(),
		"max_num_seqs", cfg.MaxNumSeqs, "max_num_batched_tokens", cfg.MaxBatchedTokens, "time_scale", cfg.TimeScale}
	if s.prof.tp() > 1 {
		attrs = append(attrs, "link", s.prof.Link)
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
	kvMem := fmt.Sprintf("Available KV cache memory: %.2f GiB", float64(s.kvTokens)*s.prof.CardKVBytesPerToken()/gib)
	if t := s.prof.tp(); t == 1 {
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

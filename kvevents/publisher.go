package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// vLLM's KVEventsConfig defaults.
const (
	DefaultEndpoint     = "tcp://*:5557"
	DefaultBufferSteps  = 10_000
	DefaultHWM          = 100_000
	DefaultMaxQueueSize = 100_000
)

// endSeq is the replay's end marker: -1 as an 8-byte signed big-endian integer.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// PublisherConfig configures a Publisher; zero values take vLLM's defaults.
type PublisherConfig struct {
	// Endpoint is the PUB socket's endpoint before the rank's offset ("" = tcp://*:5557).
	Endpoint string
	// Replay is the replay ROUTER's endpoint before the rank's offset; "" = no replay.
	Replay string
	// Topic is the first frame of every message.
	Topic string
	// Rank is the data-parallel rank: written into every batch, and the endpoints' offset.
	Rank int
	// BufferSteps is how many batches replay keeps (0 = 10,000).
	BufferSteps int
	// HWM is the PUB socket's high-water mark in messages (0 = 100,000).
	HWM int
	// MaxQueueSize is how many batches may wait for the publishing goroutine (0 = 100,000);
	// beyond it Publish drops a batch (counted in Dropped) rather than block.
	MaxQueueSize int
	Logger       *slog.Logger
}

// Publisher publishes batches of events as vLLM's ZmqEventPublisher does: a PUB socket,
// sequence numbers from 0, and a ROUTER answering replay requests from a bounded buffer.
// Encoding and sending happen on its own goroutine.
type Publisher struct {
	cfg      PublisherConfig
	endpoint string
	replayEP string
	topic    []byte
	log      *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	replay zmq4.Socket
	queue  chan Batch
	done   chan struct{}
	wg     sync.WaitGroup

	closeOnce sync.Once
	qmu       sync.RWMutex // Publish holds it shared, Close exclusively to close queue
	closing   bool         // guarded by qmu
	dropped   atomic.Uint64

	// dropLive, set by tests before the first Publish, skips the live send of a sequence
	// (it is still buffered for replay): a lost message, made to order.
	dropLive func(seq uint64) bool

	mu  sync.Mutex // guards buf
	buf []sent     // ring of the last BufferSteps batches, oldest first
}

type sent struct {
	seq     uint64
	payload []byte
}

// NewPublisher binds or connects cfg.Endpoint (offset by rank) exactly as vLLM does: it
// binds when the endpoint has "*" or "::" or is ipc:// or inproc://, and connects otherwise
// (in the background, retrying, so a subscriber that binds later still gets the stream).
// The replay endpoint is always bound. Close releases both.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	cfg.BufferSteps = orDefault(cfg.BufferSteps, DefaultBufferSteps)
	cfg.HWM = orDefault(cfg.HWM, DefaultHWM)
	cfg.MaxQueueSize = orDefault(cfg.MaxQueueSize, DefaultMaxQueueSize)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ep, err := RankEndpoint(cfg.Endpoint, cfg.Rank)
	if err != nil {
		return nil, err
	}
	rep, err := RankEndpoint(cfg.Replay, cfg.Rank)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		cfg: cfg, endpoint: ep, replayEP: rep, topic: []byte(cfg.Topic),
		log:    log.With("endpoint", ep, "rank", cfg.Rank),
		ctx:    ctx,
		cancel: cancel,
		queue:  make(chan Batch, min(cfg.MaxQueueSize, 1<<16)),
		done:   make(chan struct{}),
	}
	if err := p.open(); err != nil {
		cancel()
		p.closeSockets()
		return nil, err
	}
	p.wg.Add(1)
	go p.run()
	if p.replay != nil {
		p.wg.Add(1)
		go p.serveReplay()
	}
	return p, nil
}

// unlinkStale removes the socket file an ipc:// endpoint names before it is
// bound, as libzmq does: a killed publisher leaves its file behind, and its
// restarted engine must bind the same path.
func unlinkStale(endpoint string) {
	if path, ok := strings.CutPrefix(endpoint, "ipc://"); ok {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path)
		}
	}
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func (p *Publisher) open() error {
	bind := IsBindEndpoint(p.endpoint)
	opts := []zmq4.Option{zmq4.WithLogger(quietLogger())}
	if !bind {
		// Connecting out: retry until the subscriber binds, and reconnect when it restarts
		// (zmq4 would also redial a listener's own endpoint, hence only here).
		opts = append(opts, zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(100*time.Millisecond),
			zmq4.WithAutomaticReconnect(true))
	}
	p.pub = zmq4.NewPub(p.ctx, opts...)
	if err := p.pub.SetOption(zmq4.OptionHWM, p.cfg.HWM); err != nil {
		return fmt.Errorf("kvevents: publisher hwm: %w", err)
	}
	if bind {
		unlinkStale(p.endpoint)
		if err := p.pub.Listen(p.endpoint); err != nil {
			return fmt.Errorf("kvevents: publisher bind %s: %w", p.endpoint, err)
		}
	} else {
		// libzmq connects asynchronously and retries; zmq4's Dial blocks until it connects.
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := p.pub.Dial(p.endpoint); err != nil && p.ctx.Err() == nil {
				p.log.Warn("kv events: publisher could not connect", "err", err)
			}
		}()
	}
	if p.replayEP != "" {
		p.replay = zmq4.NewRouter(p.ctx, zmq4.WithLogger(quietLogger()))
		unlinkStale(p.replayEP)
		if err := p.replay.Listen(p.replayEP); err != nil {
			return fmt.Errorf("kvevents: replay bind %s: %w", p.replayEP, err)
		}
	}
	return nil
}

// Endpoint returns the PUB endpoint after the rank's offset.
func (p *Publisher) Endpoint() string { return p.endpoint }

// ReplayEndpoint returns the replay endpoint after the rank's offset ("" when none).
func (p *Publisher) ReplayEndpoint() string { return p.replayEP }

// Dropped returns how many batches Publish dropped because its queue was full.
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Publish queues the events of one step as a batch stamped now; the publishing goroutine
// assigns the next sequence number. An empty list publishes nothing (as vLLM). It never
// blocks: with the queue full the batch is dropped and counted. A no-op after Close.
func (p *Publisher) Publish(events []Event) {
	if len(events) == 0 {
		return
	}
	b := Batch{Time: float64(time.Now().UnixNano()) / 1e9, Rank: p.cfg.Rank, HasRank: true, Events: events}
	p.qmu.RLock()
	defer p.qmu.RUnlock()
	if p.closing {
		return
	}
	select {
	case p.queue <- b:
	default:
		if p.dropped.Add(1) == 1 {
			p.log.Warn("kv events: publish queue full, dropping batches")
		}
	}
}

func (p *Publisher) run() {
	defer p.wg.Done()
	defer close(p.done)
	var seq uint64
	var seqb [8]byte
	for b := range p.queue {
		payload, err := Encode(b)
		if err != nil {
			p.log.Error("kv events: encode", "err", err)
			continue
		}
		binary.BigEndian.PutUint64(seqb[:], seq)
		msg := zmq4.NewMsgFrom(p.topic, append([]byte(nil), seqb[:]...), payload)
		if p.dropLive != nil && p.dropLive(seq) {
			// lost on the way
		} else if err := p.pub.SendMulti(msg); err != nil && p.ctx.Err() == nil {
			p.log.Warn("kv events: send", "seq", seq, "err", err)
		}
		p.remember(seq, payload)
		seq++
	}
}

func (p *Publisher) remember(seq uint64, payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) >= p.cfg.BufferSteps {
		copy(p.buf, p.buf[1:])
		p.buf = p.buf[:len(p.buf)-1]
	}
	p.buf = append(p.buf, sent{seq, payload})
}

// buffered returns the remembered batches with seq >= start, oldest first.
func (p *Publisher) buffered(start uint64) []sent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []sent
	for _, s := range p.buf {
		if s.seq >= start {
			out = append(out, s)
		}
	}
	return out
}

// serveReplay answers [id, "", start] with [id, "", topic, seq, payload] per buffered batch
// with seq >= start, then [id, "", "", -1, ""] (vLLM's _service_replay).
func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			p.log.Warn("kv events: invalid replay request", "frames", len(msg.Frames))
			continue
		}
		id := msg.Frames[0]
		start := binary.BigEndian.Uint64(msg.Frames[2])
		for _, s := range p.buffered(start) {
			var seqb [8]byte
			binary.BigEndian.PutUint64(seqb[:], s.seq)
			if err := p.replay.Send(zmq4.NewMsgFrom(id, nil, p.topic, seqb[:], s.payload)); err != nil {
				break
			}
		}
		_ = p.replay.Send(zmq4.NewMsgFrom(id, nil, nil, endSeq, nil))
	}
}

// Close stops Publish, sends what is queued (waiting at most a second, as vLLM), and
// closes the sockets. Idempotent.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.qmu.Lock()
		p.closing = true
		close(p.queue)
		p.qmu.Unlock()
		select {
		case <-p.done:
		case <-time.After(time.Second):
			p.log.Warn("kv events: publisher closed with batches unsent")
		}
		p.cancel()
		p.wg.Wait() // the dialing goroutine too, before Close reads what Dial wrote
		p.closeSockets()
	})
	return nil
}

// quietLogger silences zmq4's own log lines (dial retries); errors reach the slog logger.
func quietLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func (p *Publisher) closeSockets() {
	if p.pub != nil {
		_ = p.pub.Close()
	}
	if p.replay != nil {
		_ = p.replay.Close()
	}
}

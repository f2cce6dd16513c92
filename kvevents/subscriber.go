package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Update is one thing a subscriber learns, delivered in order. Exactly one of Batch, Gap,
// Restarted and CaughtUp is set.
type Update struct {
	// Batch is a batch in sequence order, live or replayed; its Seq is set.
	Batch *Batch
	// Gap is a range of sequences lost that replay could not heal: the consumer must
	// distrust what it knows of this publisher (blocks stored or removed meanwhile).
	Gap *Gap
	// Restarted says the publisher's sequence went back (a new engine process, or one that
	// started over): everything known before is void. Batches of the new process follow.
	Restarted bool
	// CaughtUp is sent once, after the initial replay (or after it failed or was not
	// configured): what came before it is the publisher's history, what follows is live.
	CaughtUp bool
}

// Gap is the sequences [From, To) that were lost.
type Gap struct{ From, To uint64 }

// SubscriberConfig configures Subscribe.
type SubscriberConfig struct {
	// Endpoint is the engine's PUB endpoint (tcp://host:port or ipc:///path), after the
	// rank's offset. The subscriber connects to it, unless Bind.
	Endpoint string
	// Bind makes the subscriber bind Endpoint: for an engine given a plain tcp://host:port,
	// which connects out (IsBindEndpoint false).
	Bind bool
	// Replay is the engine's replay ROUTER endpoint (after the offset); "" = none, and gaps
	// cannot heal.
	Replay string
	// Topic filters by prefix of the first frame; "" = all.
	Topic string
	// ReplayTimeout bounds one replay request, connecting included (0 = 5s).
	ReplayTimeout time.Duration
	Logger        *slog.Logger
}

// Subscribe runs until ctx ends, reconnecting as needed; it calls fn on its own goroutine,
// in order, and returns nil when ctx ends (an error only when it cannot start: a bad
// endpoint, or a Bind that fails). At start it asks the replay endpoint for everything
// from sequence 0 so that a late joiner catches up, then delivers CaughtUp. A sequence jump
// asks replay for the missing range; what replay cannot give is a Gap. A sequence that goes
// back, or a reconnection after which replay no longer holds the last batch delivered, is
// Restarted, followed by the new process's history from replay.
func Subscribe(ctx context.Context, cfg SubscriberConfig, fn func(Update)) error {
	if cfg.Endpoint == "" {
		return errors.New("kvevents: subscribe: no endpoint")
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("endpoint", cfg.Endpoint)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// No zmq4 automatic reconnect: it redials from zmq4's own goroutine, racing Close;
	// receive redials on the same goroutine that reads instead.
	sub := zmq4.NewSub(sctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(100*time.Millisecond),
		zmq4.WithLogger(quietLogger()))
	if err := sub.SetOption(zmq4.OptionSubscribe, cfg.Topic); err != nil {
		sub.Close()
		return fmt.Errorf("kvevents: subscribe %q: %w", cfg.Topic, err)
	}
	if cfg.Bind {
		if err := sub.Listen(cfg.Endpoint); err != nil {
			sub.Close()
			return fmt.Errorf("kvevents: subscriber bind %s: %w", cfg.Endpoint, err)
		}
	}
	msgs := make(chan zmq4.Msg, 1024)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		receive(sctx, sub, cfg, log, msgs)
	}()
	defer func() { // stop receive (and any dial) before closing the socket
		cancel()
		<-recvDone
		sub.Close()
	}()

	s := &subState{ctx: sctx, cfg: cfg, fn: fn, log: log}
	if cfg.Replay != "" {
		s.heal(0)
	}
	fn(Update{CaughtUp: true})
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			s.live(m)
		}
	}
}

// receive dials (unless cfg.Bind) and forwards sub's messages until ctx ends; a message
// with nil Frames says a connection was lost. It redials after a loss.
func receive(ctx context.Context, sub zmq4.Socket, cfg SubscriberConfig, log *slog.Logger, out chan<- zmq4.Msg) {
	dial := !cfg.Bind
	for ctx.Err() == nil {
		if dial {
			// zmq4's Dial blocks until connected, retrying until ctx ends.
			if err := sub.Dial(cfg.Endpoint); err != nil {
				if ctx.Err() == nil {
					log.Warn("kv events: subscriber could not connect", "err", err)
				}
				return
			}
			dial = false
		}
		m, err := sub.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m = zmq4.Msg{}
			dial = !cfg.Bind
		}
		select {
		case out <- m:
		case <-ctx.Done():
			return
		}
		if err != nil && cfg.Bind { // a dead connection reports once; don't spin if it repeats
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}
}

type subState struct {
	ctx context.Context
	cfg SubscriberConfig
	fn  func(Update)
	log *slog.Logger

	next     uint64            // the sequence expected next
	lastHash uint64            // payload hash of batch next-1 (when next > 0)
	dup      map[uint64]uint64 // replayed batches live copies may still repeat: seq -> hash
	suspect  bool              // a connection was lost since the last live batch
}

func hashOf(p []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(p)
	return h.Sum64()
}

func (s *subState) deliver(seq uint64, payload []byte) {
	b, err := Decode(payload)
	if err != nil {
		s.log.Warn("kv events: undecodable batch", "seq", seq, "err", err)
		s.fn(Update{Gap: &Gap{From: seq, To: seq + 1}})
	} else {
		b.Seq = seq
		s.fn(Update{Batch: &b})
	}
	s.next = seq + 1
	s.lastHash = hashOf(payload)
}

func (s *subState) live(m zmq4.Msg) {
	if m.Frames == nil {
		s.suspect = true
		return
	}
	if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
		s.log.Warn("kv events: malformed message", "frames", len(m.Frames))
		return
	}
	seq := binary.BigEndian.Uint64(m.Frames[1])
	payload := m.Frames[2]
	if s.suspect && s.cfg.Replay != "" && s.next > 0 && seq >= s.next {
		s.suspect = false
		if !s.sameProcess() {
			s.restart()
		}
	}
	s.suspect = false
	if seq < s.next {
		if h, ok := s.dup[seq]; ok && h == hashOf(payload) {
			delete(s.dup, seq)
			return // already delivered through replay
		}
		s.restart()
	}
	if seq > s.next && s.cfg.Replay != "" {
		s.heal(s.next)
		if seq < s.next {
			delete(s.dup, seq)
			return // the replay delivered it
		}
	}
	if seq > s.next {
		s.fn(Update{Gap: &Gap{From: s.next, To: seq}})
	}
	s.dup = nil
	s.deliver(seq, payload)
}

func (s *subState) restart() {
	s.log.Info("kv events: publisher restarted", "expected_seq", s.next)
	s.fn(Update{Restarted: true})
	s.next, s.lastHash, s.dup = 0, 0, nil
}

// sameProcess asks replay for the last batch delivered: the same bytes mean the same
// publisher process (and the batches after it are delivered as a heal); otherwise, or
// when replay no longer holds it, the publisher cannot be trusted to be the same one.
func (s *subState) sameProcess() bool {
	got, err := replay(s.ctx, s.cfg, s.next-1)
	if err != nil || len(got) == 0 || got[0].seq != s.next-1 || hashOf(got[0].payload) != s.lastHash {
		return false
	}
	s.apply(got[1:])
	return true
}

// heal asks replay for everything from start and delivers it in order, reporting what it
// lacks before the first batch it holds as a Gap.
func (s *subState) heal(start uint64) {
	got, err := replay(s.ctx, s.cfg, start)
	if err != nil {
		s.log.Warn("kv events: replay failed", "replay", s.cfg.Replay, "from", start, "got", len(got), "err", err)
	}
	s.apply(got)
}

func (s *subState) apply(got []sent) {
	for _, r := range got {
		if r.seq < s.next {
			continue
		}
		if r.seq > s.next {
			s.fn(Update{Gap: &Gap{From: s.next, To: r.seq}})
		}
		s.deliver(r.seq, r.payload)
		if s.dup == nil {
			s.dup = make(map[uint64]uint64)
		}
		s.dup[r.seq] = s.lastHash
	}
}

// replay sends one replay request (a DEALER to the engine's ROUTER) and reads the batches
// until the end marker, within cfg.ReplayTimeout.
func replay(ctx context.Context, cfg SubscriberConfig, start uint64) ([]sent, error) {
	rctx, cancel := context.WithTimeout(ctx, cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(50*time.Millisecond),
		zmq4.WithLogger(quietLogger()))
	defer d.Close()
	if err := d.Dial(cfg.Replay); err != nil {
		return nil, fmt.Errorf("connect %s: %w", cfg.Replay, err)
	}
	var startb [8]byte
	binary.BigEndian.PutUint64(startb[:], start)
	if err := d.Send(zmq4.NewMsgFrom(nil, startb[:])); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	var out []sent
	for {
		m, err := d.Recv()
		if err != nil {
			return out, fmt.Errorf("after %d batches: %w", len(out), err)
		}
		f := m.Frames
		if len(f) != 4 || len(f[2]) != 8 {
			return out, fmt.Errorf("malformed replay frame (%d parts)", len(f))
		}
		if string(f[2]) == string(endSeq) {
			return out, nil
		}
		out = append(out, sent{seq: binary.BigEndian.Uint64(f[2]), payload: f[3]})
	}
}

package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/kvevents"
	"github.com/lmwarden/warden/sim/model"
)

// kvEventsConfig is vLLM 0.32's KVEventsConfig (vllm/config/kv_events.py), read from
// --kv-events-config JSON with its defaults; unknown fields are refused, as vLLM's
// config dataclasses forbid extras.
type kvEventsConfig struct {
	Enable         bool    `json:"enable_kv_cache_events"`
	Publisher      *string `json:"publisher"` // "zmq" | "null"; nil: zmq when enabled
	Endpoint       string  `json:"endpoint"`
	ReplayEndpoint *string `json:"replay_endpoint"`
	BufferSteps    int     `json:"buffer_steps"`
	HWM            int     `json:"hwm"`
	MaxQueueSize   int     `json:"max_queue_size"`
	Topic          string  `json:"topic"`
}

// parseKVEvents reads --kv-events-config; "" is vLLM's default (no events).
func parseKVEvents(raw string) (kvEventsConfig, error) {
	c := kvEventsConfig{Endpoint: kvevents.DefaultEndpoint, BufferSteps: kvevents.DefaultBufferSteps,
		HWM: kvevents.DefaultHWM, MaxQueueSize: kvevents.DefaultMaxQueueSize}
	if raw == "" {
		return c, nil
	}
	d := json.NewDecoder(bytes.NewReader([]byte(raw)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return c, fmt.Errorf("invalid JSON for KVEventsConfig: %w", err)
	}
	if c.Publisher != nil && *c.Publisher != "zmq" && *c.Publisher != "null" {
		return c, fmt.Errorf("Unknown event publisher '%s'", *c.Publisher)
	}
	return c, nil
}

// on reports whether events are published: enabled, and the publisher zmq (vLLM's
// EventPublisherFactory gives the null publisher otherwise).
func (c kvEventsConfig) on() bool {
	return c.Enable && (c.Publisher == nil || *c.Publisher == "zmq")
}

// startKVEvents gives every engine (data-parallel rank) its publisher, on the endpoints
// offset by its rank as vLLM's engine cores do, and turns on its scheduler's events.
// Publishing is one Publish per engine step, queued for the publisher's goroutine: the
// step loop only converts the step's events.
func (s *server) startKVEvents(log *slog.Logger) error {
	c, err := parseKVEvents(s.cfg.KVEvents)
	if err != nil || !c.on() {
		return err
	}
	replay := ""
	if c.ReplayEndpoint != nil {
		replay = *c.ReplayEndpoint
	}
	for i, eng := range s.engs {
		pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{
			Endpoint: c.Endpoint, Replay: replay, Topic: c.Topic, Rank: i,
			BufferSteps: c.BufferSteps, HWM: c.HWM, MaxQueueSize: c.MaxQueueSize, Logger: log,
		})
		if err != nil {
			s.closeKVEvents()
			return err
		}
		s.pubs = append(s.pubs, pub)
		log.Info("KV events publisher", "engine", i, "endpoint", pub.Endpoint(), "replay_endpoint", pub.ReplayEndpoint(), "topic", c.Topic)
		eng.EnableKVEvents(func(evs []model.KVEvent) { pub.Publish(toWire(evs, s.cfg.BlockSize)) })
	}
	return nil
}

func (s *server) closeKVEvents() {
	for _, p := range s.pubs {
		_ = p.Close()
	}
	s.pubs = nil
}

// toWire converts a step's events; token ids are shared, not copied.
func toWire(evs []model.KVEvent, blockSize int) []kvevents.Event {
	out := make([]kvevents.Event, len(evs))
	for i, ev := range evs {
		w := kvevents.Event{Hashes: ev.Hashes, Parent: ev.Parent, HasParent: ev.HasParent, TokenIDs: ev.Tokens,
			Tokens: len(ev.Tokens), Medium: ev.Medium, SessionID: ev.Session}
		switch ev.Kind {
		case model.KVStored:
			w.Kind, w.BlockSize = kvevents.KindStored, blockSize
		case model.KVRemoved:
			w.Kind = kvevents.KindRemoved
		case model.KVCleared:
			w.Kind = kvevents.KindCleared
		}
		out[i] = w
	}
	return out
}

// sessionHeader is vLLM's SESSION_ID_HEADER (entrypoints/generate/base/serving.py).
const sessionHeader = "X-Session-ID"

// kvLabels reads a request's KV-event labels as vLLM 0.32 does: the session id from the
// body's session_id, else the X-Session-ID header, else vllm_xargs.session_id
// (GenerateBaseServing._get_session_id); the full report mode from
// vllm_xargs.kv_cache_report_mode (v1/request.py).
func kvLabels(r *http.Request, body gjson.Result) model.SubmitOptions {
	o := model.SubmitOptions{ReportFull: body.Get("vllm_xargs.kv_cache_report_mode").String() == "full"}
	switch {
	case body.Get("session_id").String() != "":
		o.Session = body.Get("session_id").String()
	case r.Header.Get(sessionHeader) != "":
		o.Session = r.Header.Get(sessionHeader)
	default:
		if x := body.Get("vllm_xargs.session_id"); x.Type == gjson.String {
			o.Session = x.String()
		}
	}
	return o
}

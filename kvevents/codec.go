package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Decode reads a batch's msgpack payload: [ts, events, data_parallel_rank?], each event
// either a tagged map (vLLM 0.32) or a positional array whose first element is the class
// name (older releases). Unknown event types and unknown fields are skipped, so a newer
// vLLM's additions do not break it. Seq is left 0: it travels in its own frame.
func Decode(payload []byte) (Batch, error) {
	d := msgpack.NewDecoder(bytes.NewReader(payload))
	var b Batch
	n, err := d.DecodeArrayLen()
	if err != nil {
		return b, fmt.Errorf("kvevents: batch: %w", err)
	}
	if n < 2 {
		return b, fmt.Errorf("kvevents: batch has %d fields, want [ts, events, rank?]", n)
	}
	if b.Time, err = d.DecodeFloat64(); err != nil {
		return b, fmt.Errorf("kvevents: ts: %w", err)
	}
	ne, err := d.DecodeArrayLen()
	if err != nil {
		return b, fmt.Errorf("kvevents: events: %w", err)
	}
	for i := 0; i < ne; i++ {
		ev, ok, err := decodeEvent(d)
		if err != nil {
			return b, fmt.Errorf("kvevents: event %d: %w", i, err)
		}
		if ok {
			b.Events = append(b.Events, ev)
		}
	}
	if n >= 3 {
		if isNil(d) {
			_ = d.DecodeNil()
		} else {
			if b.Rank, err = d.DecodeInt(); err != nil {
				return b, fmt.Errorf("kvevents: data_parallel_rank: %w", err)
			}
			b.HasRank = true
		}
	}
	for i := 3; i < n; i++ {
		if err := d.Skip(); err != nil {
			return b, err
		}
	}
	return b, nil
}

func isNil(d *msgpack.Decoder) bool {
	c, err := d.PeekCode()
	return err == nil && c == msgpcode.Nil
}

// decodeEvent reads one event; ok is false for a type this package does not know.
func decodeEvent(d *msgpack.Decoder) (Event, bool, error) {
	c, err := d.PeekCode()
	if err != nil {
		return Event{}, false, err
	}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		return decodeTagged(d)
	}
	return decodePositional(d)
}

func decodeTagged(d *msgpack.Decoder) (Event, bool, error) {
	n, err := d.DecodeMapLen()
	if err != nil {
		return Event{}, false, err
	}
	var ev Event
	for i := 0; i < n; i++ {
		key, err := d.DecodeString()
		if err != nil {
			return ev, false, fmt.Errorf("key: %w", err)
		}
		if key == "type" {
			name, err := d.DecodeString()
			if err != nil {
				return ev, false, fmt.Errorf("type: %w", err)
			}
			ev.Kind = kindOf(name)
			continue
		}
		if err := decodeField(d, &ev, key); err != nil {
			return ev, false, fmt.Errorf("%s: %w", key, err)
		}
	}
	return ev, ev.Kind != 0, nil
}

// positional field orders of the older array form, after the class name.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality", "ownership", "session_id"}
	removedFields = []string{"block_hashes", "medium", "group_idx", "locality", "ownership"}
)

func decodePositional(d *msgpack.Decoder) (Event, bool, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return Event{}, false, err
	}
	if n < 1 {
		return Event{}, false, errors.New("empty event array")
	}
	name, err := d.DecodeString()
	if err != nil {
		return Event{}, false, fmt.Errorf("type: %w", err)
	}
	ev := Event{Kind: kindOf(name)}
	var fields []string
	switch ev.Kind {
	case KindStored:
		fields = storedFields
	case KindRemoved:
		fields = removedFields
	}
	for i := 1; i < n; i++ {
		if i-1 >= len(fields) {
			if err := d.Skip(); err != nil {
				return ev, false, err
			}
			continue
		}
		if err := decodeField(d, &ev, fields[i-1]); err != nil {
			return ev, false, fmt.Errorf("%s: %w", fields[i-1], err)
		}
	}
	return ev, ev.Kind != 0, nil
}

func decodeField(d *msgpack.Decoder, ev *Event, key string) error {
	if isNil(d) {
		return d.DecodeNil()
	}
	var err error
	switch key {
	case "block_hashes":
		var n int
		if n, err = d.DecodeArrayLen(); err != nil {
			return err
		}
		ev.Hashes = make([]uint64, 0, max(n, 0))
		for range n {
			h, err := decodeHash(d)
			if err != nil {
				return err
			}
			ev.Hashes = append(ev.Hashes, h)
		}
	case "parent_block_hash":
		ev.Parent, err = decodeHash(d)
		ev.HasParent = err == nil
	case "token_ids":
		var n int
		if n, err = d.DecodeArrayLen(); err != nil {
			return err
		}
		for range n {
			if err := d.Skip(); err != nil {
				return err
			}
		}
		ev.Tokens = max(n, 0)
	case "block_size":
		ev.BlockSize, err = d.DecodeInt()
	case "medium":
		ev.Medium, err = d.DecodeString()
	case "session_id":
		ev.SessionID, err = d.DecodeString()
	case "lora_name":
		ev.LoraName, err = d.DecodeString()
	case "group_idx":
		ev.GroupIdx, err = d.DecodeInt()
	default:
		err = d.Skip()
	}
	return err
}

// decodeHash reads an int hash as its 64 bits, or folds a bytes (or str) hash to its last
// 8 bytes big-endian: int.from_bytes(h, "big") & (2**64-1), vLLM's own int conversion.
func decodeHash(d *msgpack.Decoder) (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsBin(c) || msgpcode.IsString(c) {
		raw, err := d.DecodeBytes()
		if err != nil {
			return 0, err
		}
		return fold(raw), nil
	}
	return d.DecodeUint64()
}

func fold(raw []byte) uint64 {
	var last [8]byte
	if len(raw) >= 8 {
		copy(last[:], raw[len(raw)-8:])
	} else {
		copy(last[8-len(raw):], raw)
	}
	return binary.BigEndian.Uint64(last[:])
}

// Encode writes a batch's payload exactly as vLLM's msgspec encoder writes a KVEventBatch:
// an array [ts (float64), events, rank] (rank omitted when !HasRank), each event a map led by
// "type" with vLLM's field order. BlockStored always carries its required fields
// (lora_id and lora_name null, medium null when ""), group_idx, and session_id when set;
// BlockRemoved carries block_hashes, medium and group_idx. Seq is not part of the payload.
func Encode(b Batch) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := errWriter{e: e}
	if b.HasRank {
		w.do(e.EncodeArrayLen(3))
	} else {
		w.do(e.EncodeArrayLen(2))
	}
	w.do(e.EncodeFloat64(b.Time))
	w.do(e.EncodeArrayLen(len(b.Events)))
	for i := range b.Events {
		encodeEvent(&w, &b.Events[i])
	}
	if b.HasRank {
		w.do(e.EncodeInt(int64(b.Rank)))
	}
	if w.err != nil {
		return nil, fmt.Errorf("kvevents: encode: %w", w.err)
	}
	return buf.Bytes(), nil
}

type errWriter struct {
	e   *msgpack.Encoder
	err error
}

func (w *errWriter) do(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *errWriter) str(s string) { w.do(w.e.EncodeString(s)) }

func (w *errWriter) strOrNil(s string) {
	if s == "" {
		w.do(w.e.EncodeNil())
		return
	}
	w.str(s)
}

func (w *errWriter) hashes(hs []uint64) {
	w.do(w.e.EncodeArrayLen(len(hs)))
	for _, h := range hs {
		w.do(w.e.EncodeUint(h))
	}
}

func encodeEvent(w *errWriter, ev *Event) {
	e := w.e
	switch ev.Kind {
	case KindStored:
		n := 9
		if ev.SessionID != "" {
			n++
		}
		w.do(e.EncodeMapLen(n))
		w.str("type")
		w.str("BlockStored")
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.str("parent_block_hash")
		if ev.HasParent {
			w.do(e.EncodeUint(ev.Parent))
		} else {
			w.do(e.EncodeNil())
		}
		w.str("token_ids")
		w.do(e.EncodeArrayLen(len(ev.TokenIDs)))
		for _, t := range ev.TokenIDs {
			w.do(e.EncodeUint(uint64(t)))
		}
		w.str("block_size")
		w.do(e.EncodeInt(int64(ev.BlockSize)))
		w.str("lora_id")
		w.do(e.EncodeNil())
		w.str("medium")
		w.strOrNil(ev.Medium)
		w.str("lora_name")
		w.strOrNil(ev.LoraName)
		w.str("group_idx")
		w.do(e.EncodeInt(int64(ev.GroupIdx)))
		if ev.SessionID != "" {
			w.str("session_id")
			w.str(ev.SessionID)
		}
	case KindRemoved:
		w.do(e.EncodeMapLen(4))
		w.str("type")
		w.str("BlockRemoved")
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.str("medium")
		w.strOrNil(ev.Medium)
		w.str("group_idx")
		w.do(e.EncodeInt(int64(ev.GroupIdx)))
	case KindCleared:
		w.do(e.EncodeMapLen(1))
		w.str("type")
		w.str("AllBlocksCleared")
	default:
		w.do(fmt.Errorf("event kind %d", ev.Kind))
	}
}

package kvevents

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The golden payloads were written by vLLM 0.32's own classes and msgspec
// (testdata/golden.py); these tests check compatibility without Python.

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func repeat(v uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// goldenBatches are the batches golden.py wrote, as Encode takes them (with TokenIDs).
func goldenBatches() map[string]Batch {
	widthTokens := make([]uint32, 160)
	for i := range widthTokens {
		widthTokens[i] = uint32((i * 700) % 70000)
	}
	return map[string]Batch{
		"tagged": {Time: 1700000000.5, Rank: 2, HasRank: true, Events: []Event{
			{Kind: KindStored, Hashes: []uint64{1, 1<<64 - 1}, TokenIDs: seq(0, 32), BlockSize: 16, Medium: "GPU", SessionID: "sess-a"},
			{Kind: KindStored, Hashes: []uint64{3}, Parent: 1<<63 + 5, HasParent: true, TokenIDs: repeat(7, 16), BlockSize: 16, Medium: "CPU"},
			{Kind: KindRemoved, Hashes: []uint64{1}, Medium: "GPU"},
			{Kind: KindCleared},
		}},
		"widths": {Time: 0.25, Rank: 0, HasRank: true, Events: []Event{
			{Kind: KindStored, Hashes: []uint64{127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<63 - 1, 1 << 63},
				Parent: 200, HasParent: true, TokenIDs: widthTokens, BlockSize: 16, Medium: "GPU",
				SessionID: string(bytes.Repeat([]byte("s"), 40)), LoraName: "adapter-x", GroupIdx: 1},
			{Kind: KindRemoved, Hashes: []uint64{70000}, Medium: "CPU", GroupIdx: 1},
		}},
	}
}

// decoded is what Decode returns for an encodable batch: token counts, no ids.
func decoded(b Batch) Batch {
	out := b
	out.Events = nil
	for _, ev := range b.Events {
		ev.Tokens = len(ev.TokenIDs)
		ev.TokenIDs = nil
		out.Events = append(out.Events, ev)
	}
	return out
}

func TestEncodeMatchesVLLMBytes(t *testing.T) {
	for name, b := range goldenBatches() {
		t.Run(name, func(t *testing.T) {
			got, err := Encode(b)
			if err != nil {
				t.Fatal(err)
			}
			if want := golden(t, name); !bytes.Equal(got, want) {
				t.Errorf("Encode differs from vLLM's msgspec bytes\n got %x\nwant %x", got, want)
			}
		})
	}
}

func TestDecodeVLLMPayloads(t *testing.T) {
	bs := goldenBatches()
	tests := []struct {
		name string
		want Batch
	}{
		{"tagged", decoded(bs["tagged"])},
		{"widths", decoded(bs["widths"])},
		{"a batch without a rank and a removal without group_idx", Batch{Time: 3, Events: []Event{
			{Kind: KindRemoved, Hashes: []uint64{5, 6}},
		}}},
		{"sha256 bytes hashes fold to their last 8 bytes", Batch{Time: 4, Rank: 1, HasRank: true, Events: []Event{
			{Kind: KindStored, Hashes: []uint64{0x7c7d7e7f80818283}, Parent: 0x18191a1b1c1d1e1f, HasParent: true, Tokens: 16, BlockSize: 16, Medium: "GPU"},
			{Kind: KindRemoved, Hashes: []uint64{0x7c7d7e7f80818283}, Medium: "GPU"},
		}}},
		{"older positional arrays", Batch{Time: 5.5, Rank: 3, HasRank: true, Events: []Event{
			{Kind: KindStored, Hashes: []uint64{11, 12}, Parent: 10, HasParent: true, Tokens: 32, BlockSize: 16, Medium: "GPU"},
			{Kind: KindRemoved, Hashes: []uint64{11}, Medium: "GPU"},
			{Kind: KindCleared},
		}}},
	}
	files := map[string]string{
		"a batch without a rank and a removal without group_idx": "norank",
		"sha256 bytes hashes fold to their last 8 bytes":         "bytes",
		"older positional arrays":                                "positional",
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.name
			if f, ok := files[tc.name]; ok {
				file = f
			}
			got, err := Decode(golden(t, file))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, p := range [][]byte{nil, {0x90}, {0x92, 0xc0}, {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x05}} {
		if _, err := Decode(p); err == nil {
			t.Errorf("Decode(%x) = nil error", p)
		}
	}
}

func TestDecodeSkipsUnknownEventTypes(t *testing.T) {
	// ["AnotherEvent", 1] among known ones, as a newer vLLM might send.
	p := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x92,
		0x81, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'N', 'e', 'w', 'X',
		0x91, 0xb0, 'A', 'l', 'l', 'B', 'l', 'o', 'c', 'k', 's', 'C', 'l', 'e', 'a', 'r', 'e', 'd'}
	got, err := Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Batch{Events: []Event{{Kind: KindCleared}}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

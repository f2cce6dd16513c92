package sim

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/lmwarden/warden/sim/model"
)

// TP 1 is the profile as measured: every profile gives the same capacity and
// step times with TP unset, 0 or 1, and -tp 1 builds the same engine as no
// flag at all.
func TestTPOneIsTheMeasuredProfile(t *testing.T) {
	steps := []model.StepCost{
		{Decodes: 1, DecodeContext: 1000},
		{Decodes: 32, DecodeContext: 44000},
		{PrefillTokens: 2048, PrefillPosSum: 2048 * 2047 / 2},
		{Decodes: 8, DecodeContext: 40000, PrefillTokens: 1000, PrefillPosSum: 1000 * 5000},
	}
	for _, name := range model.ProfileNames() {
		p := model.Profiles[name]
		for _, tp := range []int{0, 1} {
			q := p.WithTP(tp)
			for _, util := range []float64{0.5, 0.85, 0.92} {
				for _, mns := range []int{32, 256} {
					if got, want := q.KVTokens(util, mns, 16), p.KVTokens(util, mns, 16); got != want {
						t.Errorf("%s TP %d: KVTokens(%v, %d) = %d, want %d", name, tp, util, mns, got, want)
					}
				}
			}
			for _, s := range steps {
				if got, want := q.StepSeconds(s), p.StepSeconds(s); got != want {
					t.Errorf("%s TP %d: StepSeconds(%+v) = %v, want exactly %v", name, tp, s, got, want)
				}
			}
			if q.AllReduceSeconds(2048) != 0 || q.CardWeightsGiB() != p.WeightsGiB || q.CardKVBytesPerToken() != p.KVBytesPerToken {
				t.Errorf("%s TP %d: all-reduce %v, card weights %v, card KV %v: want 0 and the profile's", name, tp,
					q.AllReduceSeconds(2048), q.CardWeightsGiB(), q.CardKVBytesPerToken())
			}
		}
	}
	plain, err := newServer(mustParse(t, "m"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	one, err := newServer(mustParse(t, "m", "-tp", "1"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if plain.kvTokens != 45872 || one.kvTokens != plain.kvTokens || one.numBlocks != plain.numBlocks || one.prof != plain.prof {
		t.Errorf("-tp 1: %d KV tokens, %d blocks; no flag: %d, %d (want 45,872); profiles equal %v",
			one.kvTokens, one.numBlocks, plain.kvTokens, plain.numBlocks, one.prof == plain.prof)
	}
}

func TestTPArgs(t *testing.T) {
	for _, args := range [][]string{
		{"m", "-tp", "2"}, {"m", "-tp=2"}, {"m", "--tensor-parallel-size", "2"}, {"m", "--tensor-parallel-size=2"},
		{"-tp", "2", "m"},
	} {
		c, err := ParseArgs(args, noEnv)
		if err != nil || c.TP != 2 || c.Model != "m" || len(c.LogUnknown) != 0 || c.profile().TP != 2 {
			t.Errorf("ParseArgs(%q) = TP %d, model %q, unknown %q, profile TP %d, %v; want TP 2", args, c.TP, c.Model, c.LogUnknown, c.profile().TP, err)
		}
	}
	if c := mustParse(t, "m"); c.TP != 1 || c.profile().TP != 0 {
		t.Errorf("default TP %d (profile %d), want 1 and the profile as measured", c.TP, c.profile().TP)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"m", "-tp", "0"}, "--tensor-parallel-size must be at least 1, got 0"},
		{[]string{"m", "-tp", "-2"}, "--tensor-parallel-size must be at least 1, got -2"},
		{[]string{"m", "-tp", "two"}, "--tensor-parallel-size: not an integer"},
		{[]string{"m", "-tp"}, "--tensor-parallel-size needs a value"},
		{[]string{"m", "--tensor-parallel-size", "3"}, "Total number of attention heads (32) must be divisible by tensor parallel size (3)."},
		{[]string{"m", "-tp", "2", "--sim-profile", model.CPUTinyProfile}, "has no model shape or card-to-card link"},
	} {
		_, err := ParseArgs(tc.args, noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseArgs(%q) error = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// The engine of `-tp 2` sizes its pool from both cards, says so in vLLM's
// start-up lines (per-card memory per worker, the replica's token capacity
// once) and in cache_config_info, and refuses a max_model_len beyond it.
func TestTPServer(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := newServer(mustParse(t, "m", "-tp", "2"), log)
	if err != nil {
		t.Fatal(err)
	}
	if !s.load(context.Background()) {
		t.Fatal("load")
	}
	if s.kvTokens != 146720 || s.numBlocks != 9170 {
		t.Errorf("-tp 2: %d KV tokens in %d blocks, want 146,720 in 9,170", s.kvTokens, s.numBlocks)
	}
	out := logs.String()
	for _, want := range []string{
		"tensor_parallel_size=2", "link=\"PCIe 4.0 x16 peer-to-peer, no NVLink\"",
		"msg=\"Model loading took 3.8363 GiB\" worker=TP1",
		// 146,720 x 73,728 B = 10.07 GiB on each card
		"msg=\"Available KV cache memory: 10.07 GiB\" worker=TP0", "msg=\"Available KV cache memory: 10.07 GiB\" worker=TP1",
		"GPU KV cache size: 146,720 tokens",
		"Maximum concurrency for 146,704 tokens per request: 1.00x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up log lacks %q:\n%s", want, out)
		}
	}
	rec := httptest.NewRecorder()
	s.routes().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `num_gpu_blocks="9170"`) {
		t.Errorf("/metrics lacks num_gpu_blocks=\"9170\":\n%s", rec.Body.String())
	}
	_, err = newServer(mustParse(t, "m", "-tp", "2", "--max-model-len", "200000"), slog.New(slog.DiscardHandler))
	// 200,000 x 73,728 B = 13.73 GiB needed on each card, 10.07 there.
	if err == nil || !strings.Contains(err.Error(), "(13.73 GiB KV cache is needed") ||
		!strings.Contains(err.Error(), "estimated maximum model length is 146720") {
		t.Errorf("--max-model-len 200000 at TP 2: %v, want vLLM's capacity error with per-card GiB", err)
	}
}

// The reference conversation: a ~12.5k-token working set, 3.5k of it the
// system prompt every conversation on a replica shares (prefix cache).
const (
	refShared  = 3500
	refOwn     = 9000
	refPrompt  = 7300 // the first user message
	refCtx     = 5000 // context of each decoding sequence in the decode column
	refDecodes = 8
	refRig     = 32 // sequences over the whole rig in the second decode column
)

// layoutRow is one dp x tp layout of the reference rig's four cards.
type layoutRow struct {
	dp, tp                int
	kv, kvTotal           int
	convs, convsTotal     int
	decodeMs, decodeTokS  float64
	rigTokS               float64 // decode tok/s with 32 sequences over the rig (32/dp a replica)
	prefill0, prefillWarm float64
}

// prefillSeconds is the time of a prompt of n tokens from position start on
// an idle replica, in chunks of the default 2048-token budget.
func prefillSeconds(p model.Profile, start, n int) float64 {
	total := 0.0
	for pos := start; pos < start+n; pos += 2048 {
		c := min(2048, start+n-pos)
		total += p.StepSeconds(model.StepCost{PrefillTokens: c, PrefillPosSum: float64(c)*float64(pos) + float64(c)*float64(c-1)/2})
	}
	return total
}

func layoutTable(profile string) []layoutRow {
	blocks := func(n int) int { return (n + 15) / 16 }
	var rows []layoutRow
	for _, l := range [][2]int{{4, 1}, {2, 2}, {1, 4}} {
		p := model.Profiles[profile].WithTP(l[1])
		r := layoutRow{dp: l[0], tp: l[1], kv: p.KVTokens(0.92, 32, 16)}
		r.kvTotal = r.dp * r.kv
		free := r.kv/16 - 1 - blocks(refShared) // null block, the shared prompt once
		r.convs = max(0, free/blocks(refOwn))
		r.convsTotal = r.dp * r.convs
		step := p.StepSeconds(model.StepCost{Decodes: refDecodes, DecodeContext: refDecodes * refCtx})
		r.decodeMs = step * 1e3
		r.decodeTokS = float64(r.dp*refDecodes) / step
		per := refRig / r.dp
		r.rigTokS = float64(refRig) / p.StepSeconds(model.StepCost{Decodes: per, DecodeContext: per * refCtx})
		r.prefill0 = prefillSeconds(p, 0, refPrompt)
		r.prefillWarm = prefillSeconds(p, refShared, refPrompt)
		rows = append(rows, r)
	}
	return rows
}

// The dp x tp trade-off of the reference rig (docs/simulator.md, tensor
// parallelism). WARDEN_TP_TABLE=1 prints it:
//
//	WARDEN_TP_TABLE=1 go test -run TPLayoutTable -v ./sim/
func TestTPLayoutTable(t *testing.T) {
	for _, profile := range []string{model.DefaultProfile, model.ReferenceProfile} {
		rows := layoutTable(profile)
		for i := 1; i < len(rows); i++ {
			a, b := rows[i-1], rows[i]
			if b.kvTotal <= a.kvTotal || b.convsTotal < a.convsTotal || b.decodeTokS >= a.decodeTokS || b.prefill0 >= a.prefill0 {
				t.Errorf("%s: %dx%d -> %dx%d: want more KV and conversations, less decode throughput, faster prefill: %+v -> %+v",
					profile, a.dp, a.tp, b.dp, b.tp, a, b)
			}
		}
		if os.Getenv("WARDEN_TP_TABLE") == "" {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s, util 0.92, max_num_seqs 32, 2048-token chunks\n", profile)
		b.WriteString("| dp x tp | KV tokens / replica | KV tokens total | conversations / replica | conversations total | decode step, 8 seqs x 5k (ms) | decode tok/s, all replicas | decode tok/s, 32 seqs x 5k over the rig | prefill 7.3k from 0 (s) | prefill 7.3k after 3.5k cached (s) |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %d x %d | %s | %s | %d | %d | %.1f | %.0f | %.0f | %.2f | %.2f |\n", r.dp, r.tp, thousands(r.kv), thousands(r.kvTotal),
				r.convs, r.convsTotal, r.decodeMs, r.decodeTokS, r.rigTokS, r.prefill0, r.prefillWarm)
		}
		t.Log(b.String())
	}
}

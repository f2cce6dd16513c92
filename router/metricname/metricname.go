// Package metricname names the engine metrics the warden reads and
// re-exports: vLLM's own series (what router/engine parses from an engine's
// /metrics) and the warden's per-replica mirrors of them (what router/panel's
// collector exports, and what router/engine reads back from another warden
// used as a replica). A leaf: it imports nothing.
package metricname

// vLLM's series, as an engine's /metrics carries them. Counters are read
// with and without their _total suffix.
const (
	VLLMRunning     = "vllm:num_requests_running"
	VLLMWaiting     = "vllm:num_requests_waiting"
	VLLMKVUsage     = "vllm:kv_cache_usage_perc"
	VLLMGPUKVUsage  = "vllm:gpu_cache_usage_perc" // the KV usage gauge's name in older releases
	VLLMPrefixQuery = "vllm:prefix_cache_queries"
	VLLMPrefixHits  = "vllm:prefix_cache_hits"
	VLLMPrompt      = "vllm:prompt_tokens"
	VLLMGeneration  = "vllm:generation_tokens"
	VLLMPreemptions = "vllm:num_preemptions"
	VLLMCacheConfig = "vllm:cache_config_info" // the cache config as labels (num_gpu_blocks, block_size, kv_offloading_*)
	// SimTimeScale is the simulator's simulated seconds per wall second
	// (its --sim-time-scale); real engines do not export it: 1.
	SimTimeScale = "warden_sim_time_scale"
	// EngineLabel is the label vLLM puts on each series: the engine's
	// data-parallel rank ("0" for a server with one engine; 0..N-1 under
	// --data-parallel-size N, where one API server exports all N).
	EngineLabel = "engine"

	// vLLM's host KV tier, vLLM 0.32.0 (docs/kv-offload.md names the
	// source lines). Tokens of prompts that missed the GPU prefix cache and
	// were looked up in the connector's tier, and the tokens found there
	// (loaded back), per engine (labels model_name, engine).
	VLLMExternalQueries = "vllm:external_prefix_cache_queries"
	VLLMExternalHits    = "vllm:external_prefix_cache_hits"
	// Bytes the native offloading connector moved host to GPU (loads) and
	// GPU to host (stores).
	VLLMOffloadLoadBytes  = "vllm:kv_offload_load_bytes"
	VLLMOffloadStoreBytes = "vllm:kv_offload_store_bytes"
	// The same, under the deprecated name with a transfer_type label
	// (CPU_to_GPU, GPU_to_CPU), for vLLM releases before the flat names.
	VLLMOffloadTotalBytes = "vllm:kv_offload_total_bytes"
)

// The warden's mirrors of an engine's series, one per replica (label
// "replica" = rank). Counters are deltas since warden start with engine
// restarts folded in, so they never go down while the warden runs.
const (
	EngineRunning      = "warden_engine_requests_running"                  // gauge
	EngineWaiting      = "warden_engine_requests_waiting"                  // gauge
	EngineKVUsage      = "warden_engine_kv_cache_usage_ratio"              // gauge 0..1
	EngineKVCapacity   = "warden_engine_kv_cache_capacity_tokens"          // gauge
	EnginePrefixQuery  = "warden_engine_prefix_cache_queries_tokens_total" // counter
	EnginePrefixHits   = "warden_engine_prefix_cache_hits_tokens_total"    // counter
	EnginePreemptions  = "warden_engine_preemptions_total"                 // counter
	EnginePromptTokens = "warden_engine_prompt_tokens_total"               // counter
	EngineGenTokens    = "warden_engine_generation_tokens_total"           // counter
)

// Scraped are the series an engine's /metrics is asked for: every vLLM
// series above (counters with their _total samples) and the simulator's
// time scale. vLLM serves /metrics through prometheus_client, which answers
// ?name[]=NAME&name[]=... with only the samples named, sparing the engine's
// API server the rest of its several hundred series per scrape.
var Scraped = []string{
	VLLMRunning, VLLMWaiting, VLLMKVUsage, VLLMGPUKVUsage, VLLMCacheConfig, SimTimeScale,
	VLLMPrefixQuery, VLLMPrefixQuery + "_total", VLLMPrefixHits, VLLMPrefixHits + "_total",
	VLLMPrompt, VLLMPrompt + "_total", VLLMGeneration, VLLMGeneration + "_total",
	VLLMPreemptions, VLLMPreemptions + "_total",
	VLLMExternalQueries, VLLMExternalQueries + "_total", VLLMExternalHits, VLLMExternalHits + "_total",
	VLLMOffloadLoadBytes, VLLMOffloadLoadBytes + "_total", VLLMOffloadStoreBytes, VLLMOffloadStoreBytes + "_total",
	VLLMOffloadTotalBytes, VLLMOffloadTotalBytes + "_total",
}

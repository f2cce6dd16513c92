// Package sim is a vLLM stand-in engine: a process that warden launches in
// place of `vllm serve` (as `warden sim serve MODEL [vLLM flags]`), with the
// same argv, endpoints, metric names and usage fields, and an engine model
// (tokenizer, paged KV blocks, prefix cache, continuous batching, chunked
// prefill, preemption, step time from a hardware profile; optionally vLLM's
// host-RAM KV tier, its native KV offloading: offload.go) that makes prefix
// caching, queueing and eviction behave like vLLM's where routing can see it.
package sim

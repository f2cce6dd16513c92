// Package model is the simulated vLLM engine that package sim serves: a
// deterministic tokenizer and the ChatML template (tokenizer.go,
// template.go), paged KV blocks with a prefix cache (blocks.go), vLLM V1's
// scheduler with continuous batching, chunked prefill and preemption
// (scheduler.go), optionally vLLM's host-RAM KV tier, its native KV
// offloading (offload.go), step times from a hardware profile (profile.go),
// answer lengths drawn from coding agents' (output.go), and the engine loop
// on a simulated clock (engine.go): enough that prefix caching, queueing and
// eviction behave like vLLM's where routing can see it. It knows nothing of
// HTTP, JSON or the argv; a harness can drive a Scheduler on a virtual clock
// without the Engine.
package model

// Package sim is the front end of the vLLM stand-in: a process that warden
// launches in place of `vllm serve` (as `warden sim serve MODEL [vLLM
// flags]`), with vLLM's argv (argv.go), start-up lines and refusals
// (main.go, startup.go), endpoints (server.go; the OpenAI chat and text
// completions, Anthropic Messages and Responses APIs in openai.go,
// anthropic.go and responses.go, their bodies as chat turns in turns.go,
// tool calls in tools.go), metric names (metrics.go), usage fields and
// fault flags (faults.go). The engine it serves is package sim/model's.
package sim

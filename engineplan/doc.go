// Package engineplan decides what each engine of a warden run is told,
// before any starts: its command line (Engine.Argv: vLLM's `vllm serve` or
// the simulator's `warden sim serve`, with the same flags), its
// environment (EngineEnv: the variables that would join a data-parallel
// group dropped, the rank's CUDA_VISIBLE_DEVICES), the devices of every
// rank (FindDevices: GPU groups, or CPU core sets and KV cache sizes), the
// tool-call and reasoning parsers (ChooseTools), the context
// (ChooseContext), the host KV tier (PlanOffload), and the facts these
// depend on: the model's files and the installed vLLM's version
// (ReadFacts, InstalledVersion, VersionAtLeast), with the per-version rules
// beside each decision; and what vLLM's known refusals to start mean for
// the plan (Refusals: the hints of a failed start), and how an engine runs
// from a container image (Container, ImageVersion).
//
// It starts, watches and stops nothing: package launch runs what is
// planned here, and imports this package for the engine environment, the
// refusal rules it matches a failed rank's log against, and the container
// labels.
package engineplan

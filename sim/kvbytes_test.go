package sim

import "testing"

func TestKVCacheBytes(t *testing.T) {
	noEnv := func(string) string { return "" }
	// The reference profile's fit: 38,000 tokens of 144 KiB (5.22 GiB).
	b, err := KVCacheBytes([]string{"m", "--sim-profile", "a4000-qwen3-4b-2507-bf16-vllm026-fit", "--max-num-seqs", "32"}, noEnv)
	if err != nil || b != 38000*147456 {
		t.Errorf("fit profile: %d bytes, %v; want %d", b, err, 38000*147456)
	}
	if b, err := KVCacheBytes([]string{"m", "--sim-kv-tokens", "1000"}, noEnv); err != nil || b != 1000*147456 {
		t.Errorf("--sim-kv-tokens 1000: %d, %v", b, err)
	}
	if _, err := KVCacheBytes([]string{"m", "--sim-profile", "nope"}, noEnv); err == nil {
		t.Error("an unknown profile: no error")
	}
}

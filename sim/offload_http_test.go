package sim_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

// TestHostTierOverHTTP: `warden sim serve` with vLLM's offloading flags logs
// the tier, serves a conversation evicted from its GPU cache from host
// memory (cached_tokens, the external counters and the offload byte
// counters as vLLM exports them), reports the tier in /version and empties
// it on /reset_prefix_cache?reset_external=true. Without the flags none of
// the tier's metrics appear.
func TestHostTierOverHTTP(t *testing.T) {
	t.Setenv("VLLM_SERVER_DEV_MODE", "1")
	p := simproc.Start(t, "--sim-time-scale", fast, "--enable-prompt-tokens-details", "--sim-kv-tokens", "4096",
		"--kv-offloading-backend", "native", "--kv-offloading-size", "2")
	if out := p.Output(); !strings.Contains(out, "CPU KV offload cache size: 14,560 tokens") || // 2 GiB / 2.25 MiB = 910 blocks
		!strings.Contains(out, "Creating v1 connector with name: OffloadingConnector") {
		t.Errorf("start-up lines lack the tier:\n%s", out)
	}
	if raw := scrape(t, p.URL+"/metrics"); !strings.Contains(raw, `kv_offloading_backend="native"`) || !strings.Contains(raw, `kv_offloading_size="2.0"`) {
		t.Errorf("vllm:cache_config_info lacks the tier's labels:\n%s", raw)
	}
	if _, v := get(t, p.URL+"/version"); v.Get("sim.kv_offload_tokens").Int() != 14560 {
		t.Errorf("/version: %s, want sim.kv_offload_tokens 14560", v.Raw)
	}
	convo := func(seed string) []map[string]any { return []map[string]any{msg("user", words(seed, 1500))} }
	a := convo("alpha")
	_, r1 := post(t, p.URL+"/v1/chat/completions", chatBody(a, 16))
	p1 := int(r1.Get("usage.prompt_tokens").Int())
	for _, seed := range []string{"bravo", "charlie", "delta"} { // 3 x 2.3k more through a 4k GPU cache; all fit the tier
		post(t, p.URL+"/v1/chat/completions", chatBody(convo(seed), 16))
	}
	a2 := append(a, msg("assistant", r1.Get("choices.0.message.content").String()), msg("user", words("more", 300)))
	_, r2 := post(t, p.URL+"/v1/chat/completions", chatBody(a2, 16))
	if got, want := int(r2.Get("usage.prompt_tokens_details.cached_tokens").Int()), p1/16*16; got != want {
		t.Errorf("turn 2 cached_tokens = %d, want %d: turn 1's prompt blocks, from the GPU or the host tier", got, want)
	}
	m := p.Metrics(t)
	ext := m["vllm:external_prefix_cache_hits_total"]
	if ext <= 0 || m["vllm:external_prefix_cache_queries_total"] < ext {
		t.Errorf("external hits %v of %v queried, want some", ext, m["vllm:external_prefix_cache_queries_total"])
	}
	if got, want := m["vllm:kv_offload_load_bytes_total"], ext*147456; got != want {
		t.Errorf("load bytes %v, want %v (147,456 B a token)", got, want)
	}
	if got, want := m["vllm:prompt_tokens_cached_by_source_total"], m["vllm:prefix_cache_hits_total"]+ext; got != want {
		t.Errorf("cached by source %v, want device + host = %v", got, want)
	}
	if m["vllm:kv_offload_store_bytes_total"] < 4*float64(p1/16)*16*147456 {
		t.Errorf("store bytes %v: want at least the 4 conversations' prompt blocks", m["vllm:kv_offload_store_bytes_total"])
	}
	if code, r := post(t, p.URL+"/reset_prefix_cache?reset_external=true", ""); code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, r.Raw)
	}
	if _, r := post(t, p.URL+"/v1/chat/completions", chatBody(a2, 16)); r.Get("usage.prompt_tokens_details.cached_tokens").Int() != 0 {
		t.Errorf("hit after resetting both tiers: %s", r.Get("usage").Raw)
	}

	plain := simproc.Start(t, "--sim-time-scale", fast)
	post(t, plain.URL+"/v1/chat/completions", chatBody(a, 4))
	for name := range plain.Metrics(t) {
		if strings.Contains(name, "external_prefix_cache") || strings.Contains(name, "kv_offload") || strings.Contains(name, "by_source") {
			t.Errorf("without the tier /metrics has %s", name)
		}
	}
}

// TestHostTierRefusedAtStart: the refusals end the process with the reason.
func TestHostTierRefusedAtStart(t *testing.T) {
	p := simproc.StartNoWait(t, "--kv-offloading-backend", "lmcache", "--kv-offloading-size", "8")
	<-p.Exited()
	if out := p.Output(); !strings.Contains(out, "only vLLM's native CPU offloading") {
		t.Errorf("lmcache: output\n%s", out)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

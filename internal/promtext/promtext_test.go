package promtext

import (
	"strings"
	"testing"
)

// A fragment of vLLM 0.32.0's /metrics (CPU build), with a second engine
// series added to show the sums.
const vllm032 = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
vllm:num_requests_running{engine="1",model_name="tiny"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 4678.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="tiny"} 1.7961292209940557e+09
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits{engine="0"} 3840
`

func TestFamilies(t *testing.T) {
	f, err := Parse(strings.NewReader(vllm032))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := f.Sum("vllm:num_requests_running"); !ok || v != 3 {
		t.Errorf("running %v %v, want 3 summed over engines", v, ok)
	}
	if v, ok := f.Counter("vllm:prefix_cache_queries"); !ok || v != 4678 {
		t.Errorf("queries (with _total) %v %v", v, ok)
	}
	if v, ok := f.Counter("vllm:prefix_cache_hits"); !ok || v != 3840 {
		t.Errorf("hits (without _total) %v %v", v, ok)
	}
	if by, _ := f.SumBy("vllm:num_requests_running", "engine"); by["0"] != 2 || by["1"] != 1 {
		t.Errorf("by engine %v", by)
	}
	if _, ok := f.Sum("vllm:gpu_cache_usage_perc"); ok {
		t.Error("an absent family was found")
	}
	if _, err := Parse(strings.NewReader("garbage{{{ 1\n")); err == nil {
		t.Error("garbage parsed")
	}
}

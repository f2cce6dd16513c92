package engineplan

import (
	"strings"
	"testing"
)

func TestCheckExtraRejectsFlagsTheWardenOwns(t *testing.T) {
	for _, extra := range [][]string{
		{"--host", "0.0.0.0"}, {"--host=0.0.0.0"}, {"--max-model-len", "8192", "--port", "9000"},
		{"--uds", "/tmp/s"}, {"--served-model-name", "x"}, {"--max-num-seqs=64"}, {"-tp", "2"},
		{"--data-parallel-size", "2"}, {"--data_parallel_size=2"}, {"-dp", "2"},
	} {
		err := CheckExtra(extra)
		if err == nil || !strings.Contains(err.Error(), "set by the warden") {
			t.Errorf("%q: got %v", extra, err)
		}
	}
	for _, extra := range [][]string{nil, {"--max-model-len", "8192"}, {"--sim-time-scale", "10"}, {"--hostname-is-not-host"}} {
		if err := CheckExtra(extra); err != nil {
			t.Errorf("%q: %v", extra, err)
		}
	}
}

// `-- --data-parallel-size 2` would make every rank a data-parallel server
// of its own; the refusal names both warden flags (issue 45).
func TestCheckExtraDataParallelNamesDPAndVLLMDP(t *testing.T) {
	err := CheckExtra([]string{"--max-model-len", "8192", "--data-parallel-size", "2"})
	if err == nil || !strings.Contains(err.Error(), "--data-parallel-size is set by the warden: use the warden's --dp") ||
		!strings.Contains(err.Error(), "--vllm-dp") {
		t.Errorf("got %v", err)
	}
}

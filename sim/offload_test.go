package sim

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/sim/model"
)

func TestHostTierArgs(t *testing.T) {
	none := func(string) string { return "" }
	good := []struct {
		args []string
		env  map[string]string
		gib  float64
	}{
		{[]string{"m"}, nil, 0},
		{[]string{"m", "--kv-offloading-backend", "native", "--kv-offloading-size", "16"}, nil, 16},
		{[]string{"m", "--kv-offloading-size=0.5"}, nil, 0.5},
		{[]string{"m", "--sim-kv-offload-gib", "8"}, nil, 8},
		{[]string{"m"}, map[string]string{"WARDEN_SIM_KV_OFFLOAD_GIB": "4"}, 4},
		{[]string{"m", "--kv-offloading-backend", "lmcache"}, nil, 0}, // no size: offloading stays off, as in vLLM
		{[]string{"m", "--kv-offloading-size", "16", "-tp", "2"}, nil, 16},
	}
	for _, tc := range good {
		c, err := ParseArgs(tc.args, func(k string) string { return tc.env[k] })
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if c.KVOffloadGiB != tc.gib || len(c.LogUnknown) != 0 {
			t.Errorf("%v: size %v GiB, unknown %v; want %v GiB, none", tc.args, c.KVOffloadGiB, c.LogUnknown, tc.gib)
		}
	}
	bad := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"m", "--kv-offloading-backend", "lmcache", "--kv-offloading-size", "16"}, nil, "only vLLM's native CPU offloading"},
		{[]string{"m", "--kv-offloading-backend", "mooncake", "--kv-offloading-size", "16"}, nil, "invalid choice: 'mooncake' (choose from 'native', 'lmcache')"},
		{[]string{"m", "--kv-offloading-size", "-1"}, nil, "positive number of GiB"},
		{[]string{"m", "--kv-offloading-size", "lots"}, nil, "not a number"},
		{[]string{"m", "--kv-offloading-size", "0.001"}, nil, "holds no KV block"},
		{[]string{"m", "--kv-offloading-size", "4", "--sim-profile", model.CPUTinyProfile}, nil, "has no host link"},
		{[]string{"m", "--kv-offloading-size", "4"}, map[string]string{"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}, "SimpleCPUOffloadConnector"},
	}
	for _, tc := range bad {
		getenv := none
		if tc.env != nil {
			getenv = func(k string) string { return tc.env[k] }
		}
		_, err := ParseArgs(tc.args, getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

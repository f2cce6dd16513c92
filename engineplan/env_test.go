package engineplan

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEngineEnv(t *testing.T) {
	shell := []string{"PATH=/bin", "VLLM_PORT=9999", "CUDA_VISIBLE_DEVICES=0,1,2,3", "HF_HOME=/data",
		"VLLM_DP_RANK=1", "VLLM_DP_RANK_LOCAL=1", "VLLM_DP_SIZE=4", "VLLM_DP_MASTER_IP=10.0.0.1",
		"VLLM_DP_MASTER_PORT=29500", "VLLM_DP_SOMETHING_NEW=x", "VLLM_ELASTIC_EP_SCALE_UP_LAUNCH=1",
		"CUDA_DEVICE_ORDER=FASTEST_FIRST", "VLLM_HOST_IP=10.0.0.2", "VLLM_RANDOMIZE_DP_DUMMY_INPUTS=1",
		"VLLM_LOGGING_LEVEL=DEBUG", "MASTER_PORT=1234"}
	kept := []string{"PATH=/bin", "HF_HOME=/data", "VLLM_HOST_IP=10.0.0.2", "VLLM_RANDOMIZE_DP_DUMMY_INPUTS=1",
		"VLLM_LOGGING_LEVEL=DEBUG", "MASTER_PORT=1234"}
	tests := []struct {
		name string
		base []string
		gpus []string
		want []string
	}{
		{name: "GPUs: indices in PCI bus order, data-parallel variables gone", base: shell, gpus: []string{"2", "3"},
			want: append(append([]string(nil), kept...), "CUDA_VISIBLE_DEVICES=2,3", "CUDA_DEVICE_ORDER=PCI_BUS_ID")},
		{name: "no GPUs (CPU engines, simulator): CUDA variables as inherited", base: shell,
			want: []string{"PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1,2,3", "HF_HOME=/data", "CUDA_DEVICE_ORDER=FASTEST_FIRST",
				"VLLM_HOST_IP=10.0.0.2", "VLLM_RANDOMIZE_DP_DUMMY_INPUTS=1", "VLLM_LOGGING_LEVEL=DEBUG", "MASTER_PORT=1234"}},
		{name: "an inherited empty CUDA_VISIBLE_DEVICES is replaced", base: []string{"CUDA_VISIBLE_DEVICES="}, gpus: []string{"0"},
			want: []string{"CUDA_VISIBLE_DEVICES=0", "CUDA_DEVICE_ORDER=PCI_BUS_ID"}},
		{name: "a variable whose name only starts like one is kept", base: []string{"VLLM_PORTS=1", "VLLM_DPX=1", "XVLLM_DP_RANK=1"},
			want: []string{"VLLM_PORTS=1", "VLLM_DPX=1", "XVLLM_DP_RANK=1"}},
		{name: "empty", want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, EngineEnv(tt.base, tt.gpus)); diff != "" {
				t.Errorf("EngineEnv() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDroppedEnv(t *testing.T) {
	base := []string{"PATH=/bin", "VLLM_DP_SIZE=4", "VLLM_PORT=1", "VLLM_DP_SIZE=2", "VLLM_DP_MASTER_PORT=29500",
		"VLLM_ELASTIC_EP_SCALE_UP_LAUNCH=0", "VLLM_PORTS=1"}
	want := []string{"VLLM_DP_SIZE", "VLLM_PORT", "VLLM_DP_MASTER_PORT", "VLLM_ELASTIC_EP_SCALE_UP_LAUNCH"}
	if diff := cmp.Diff(want, DroppedEnv(base)); diff != "" {
		t.Errorf("DroppedEnv() (-want +got):\n%s", diff)
	}
	if got := DroppedEnv([]string{"PATH=/bin"}); got != nil {
		t.Errorf("DroppedEnv() = %q, want nil", got)
	}
}

package engineplan

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lmwarden/warden/gpu"
)

// --image without GPUs points at --device cpu, not at --engine sim, which
// --image refuses (issue 45); a host run keeps gpu.ErrNoGPU's words.
func TestNoGPUWithImageSuggestsDeviceCPU(t *testing.T) {
	err := noGPUWithImage(Request{Image: "vllm/vllm-openai:v0.32.0"}, fmt.Errorf("discover: %w", gpu.ErrNoGPU))
	if !errors.Is(err, gpu.ErrNoGPU) || !strings.Contains(err.Error(), "--device cpu") || strings.Contains(err.Error(), "to run without GPUs use --engine sim") {
		t.Errorf("--image: %v", err)
	}
	host := fmt.Errorf("discover: %w", gpu.ErrNoGPU)
	if got := noGPUWithImage(Request{}, host); got != host {
		t.Errorf("host run: %v, want the error unchanged", got)
	}
	other := errors.New("nvml: driver too old")
	if got := noGPUWithImage(Request{Image: "x"}, other); got != other {
		t.Errorf("another error: %v, want it unchanged", got)
	}
}

package command

import (
	"context"
	"strings"
	"testing"

	"github.com/lmwarden/warden/gpu"
)

func TestGpusCommandWithoutDriver(t *testing.T) {
	if _, err := gpu.Discover(context.Background()); err == nil {
		t.Skip("this machine has GPUs")
	}
	_, _, err := runWarden(t, "gpus", "--json")
	if err == nil || !strings.Contains(err.Error(), "--engine sim") {
		t.Fatalf("warden gpus without a driver: %v", err)
	}
}

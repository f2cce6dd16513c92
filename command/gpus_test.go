package command

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lmwarden/warden/gpu"
)

func TestGpusCommandWithoutDriver(t *testing.T) {
	if _, err := gpu.Discover(context.Background()); err == nil {
		t.Skip("this machine has GPUs")
	}
	out, _, err := runWarden(t, "gpus", "--json")
	if err == nil || !strings.Contains(err.Error(), "--engine sim") {
		t.Fatalf("warden gpus without a driver: %v", err)
	}
	var devs []gpu.Device
	if jerr := json.Unmarshal([]byte(out), &devs); jerr != nil || devs == nil || len(devs) != 0 {
		t.Errorf("warden gpus --json without GPUs printed %q (%v), want an empty JSON array", out, jerr)
	}
}

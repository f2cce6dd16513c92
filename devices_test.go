package main

import (
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/lmwarden/warden/internal/simproc"
)

func TestDevicesShowsTheCPUSplit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU topology is read from Linux sysfs")
	}
	out, err := exec.Command(simproc.Binary(t), "devices", "--dp", "1", "--cpu-kv-cache", "1GiB", "--json").Output()
	if err != nil {
		t.Fatalf("warden devices --json: %v\n%s", err, out)
	}
	var rep devicesReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.CPU.CPUs) == 0 || len(rep.Ranks) != 1 || len(rep.Ranks[0].CPUs) != len(rep.CPU.CPUs) ||
		rep.KVPerRank != 1<<30 || rep.MemAvail == 0 {
		t.Errorf("one rank should get every usable CPU and 1 GiB of KV: %s", out)
	}
	out, _ = exec.Command(simproc.Binary(t), "devices", "--dp", "4096").CombinedOutput()
	if !strings.Contains(string(out), "--dp 4096 needs at least 4096 physical CPU cores") {
		t.Errorf("too many ranks for the cores:\n%s", out)
	}
}

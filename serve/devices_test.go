package serve

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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

func TestServeDeviceCPURefusesMoreRanksThanCores(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU topology is read from Linux sysfs")
	}
	fake := t.TempDir() + "/vllm"
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dp", "4096"}, "--dp 4096 needs at least 4096 physical CPU cores"},
		{[]string{"--tp", "2"}, "--tp 2 with --device cpu"},
		{[]string{"--cpu-kv-cache", "lots"}, `--cpu-kv-cache: "lots" is not a size`},
		{[]string{"--engine", "sim"}, "needs no device"},
	} {
		args := append([]string{"serve", "--model", "m", "--device", "cpu", "--vllm", fake,
			"--port", strconv.Itoa(simproc.FreePort(t))}, tc.args...)
		out, err := exec.Command(simproc.Binary(t), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("serve %v: %v\n%s\nwant %q", tc.args, err, out, tc.want)
		}
	}
}

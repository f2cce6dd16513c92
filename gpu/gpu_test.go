package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const gib = 1 << 30

func fourGPUs() []Device {
	return []Device{
		{Index: 0, UUID: "GPU-aaaa-0", Name: "NVIDIA RTX A4000", MemTotal: 16 * gib, MemFree: 16 * gib},
		{Index: 1, UUID: "GPU-bbbb-1", Name: "NVIDIA RTX A4000", MemTotal: 16 * gib, MemFree: 16 * gib},
		{Index: 2, UUID: "GPU-cccc-2", Name: "NVIDIA RTX A4000", MemTotal: 16 * gib, MemFree: 16 * gib},
		{Index: 3, UUID: "GPU-cccd-3", Name: "NVIDIA RTX A4000", MemTotal: 16 * gib, MemFree: 16 * gib},
	}
}

func indices(devs []Device) []int {
	out := []int{}
	for _, d := range devs {
		out = append(out, d.Index)
	}
	return out
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name        string
		cuda, flag  string
		want        []int
		wantErrPart string
	}{
		{name: "nothing set means all", want: []int{0, 1, 2, 3}},
		{name: "CUDA_VISIBLE_DEVICES by index keeps its order", cuda: "3,1", want: []int{3, 1}},
		{name: "--gpus by index", flag: "2, 0", want: []int{2, 0}},
		{name: "UUID prefix", flag: "GPU-bbbb", want: []int{1}},
		{name: "UUID is case-insensitive", cuda: "gpu-aaaa-0", want: []int{0}},
		{name: "--gpus within CUDA_VISIBLE_DEVICES", cuda: "1,2,3", flag: "3", want: []int{3}},
		{name: "--gpus outside CUDA_VISIBLE_DEVICES", cuda: "1,2", flag: "0", wantErrPart: "within CUDA_VISIBLE_DEVICES"},
		{name: "unknown index", flag: "7", wantErrPart: "no GPU with index 7 (have GPU 0, 1, 2, 3)"},
		{name: "unknown UUID", cuda: "GPU-ffff", wantErrPart: "no GPU with UUID GPU-ffff"},
		{name: "ambiguous UUID prefix", flag: "GPU-ccc", wantErrPart: "matches 2 GPUs"},
		{name: "duplicate", flag: "1,1", wantErrPart: "listed twice"},
		{name: "MIG instance", cuda: "MIG-1234", wantErrPart: "MIG instances are not supported"},
		{name: "only commas", flag: " , ", wantErrPart: "names no GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Select(fourGPUs(), tt.cuda, tt.flag)
			if tt.wantErrPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrPart) {
					t.Fatalf("Select() error = %v, want one containing %q", err, tt.wantErrPart)
				}
				return
			}
			if err != nil {
				t.Fatalf("Select() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, indices(got)); diff != "" {
				t.Errorf("Select() indices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssign(t *testing.T) {
	tests := []struct {
		name        string
		n, dp, tp   int
		want        [][]int
		wantErrPart string
	}{
		{name: "one GPU per rank", n: 4, dp: 4, tp: 1, want: [][]int{{0}, {1}, {2}, {3}}},
		{name: "contiguous tp groups", n: 4, dp: 2, tp: 2, want: [][]int{{0, 1}, {2, 3}}},
		{name: "spare GPUs stay unused", n: 4, dp: 1, tp: 2, want: [][]int{{0, 1}}},
		{name: "too few GPUs", n: 4, dp: 3, tp: 2, wantErrPart: "need 6 GPUs (--dp 3 x --tp 2) but 4 are available (GPU 0, 1, 2, 3)"},
		{name: "no GPUs names the simulator", n: 0, dp: 1, tp: 1, wantErrPart: "--engine sim"},
		{name: "one GPU needed, in the singular", n: 0, dp: 1, tp: 1, wantErrPart: "need 1 GPU (--dp 1 x --tp 1) but 0 are available"},
		{name: "one GPU available, in the singular", n: 1, dp: 2, tp: 1, wantErrPart: "need 2 GPUs (--dp 2 x --tp 1) but 1 is available"},
		{name: "zero dp", n: 4, dp: 0, tp: 1, wantErrPart: "at least 1"},
		{name: "negative tp", n: 4, dp: 1, tp: -1, wantErrPart: "at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups, err := Assign(fourGPUs()[:tt.n], tt.dp, tt.tp)
			if tt.wantErrPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrPart) {
					t.Fatalf("Assign() error = %v, want one containing %q", err, tt.wantErrPart)
				}
				return
			}
			if err != nil {
				t.Fatalf("Assign() error = %v", err)
			}
			var got [][]int
			for _, g := range groups {
				got = append(got, indices(g))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Assign() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBusyWarnings(t *testing.T) {
	devs := fourGPUs()
	devs[2].Processes = []Process{{PID: 1234, Name: "python3", UsedBytes: 14*gib + gib/10}}
	devs[2].MemFree = 1 * gib
	devs[3].Processes = []Process{{PID: 99}}
	devs[1].MemFree = 6 * gib // 10 GiB used by no visible process
	devs[0].MemFree = 15*gib + gib/2
	tests := []struct {
		name   string
		groups [][]Device
		want   []string
	}{
		{name: "idle GPUs", groups: [][]Device{{devs[0]}}, want: nil},
		{name: "busy GPU names the process", groups: [][]Device{{devs[0]}, {devs[2]}}, want: []string{
			"GPU 2 is in use by python3 (pid 1234, 14.1 GiB)",
		}},
		{name: "unknown process without memory", groups: [][]Device{{devs[3]}}, want: []string{
			"GPU 3 is in use by an unknown process (pid 99)",
		}},
		{name: "memory used by invisible processes", groups: [][]Device{{devs[1]}}, want: []string{
			"GPU 1 has 10.0 GiB of 16.0 GiB in use by processes not visible here (another container?)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, BusyWarnings(tt.groups)); diff != "" {
				t.Errorf("BusyWarnings() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVisibleDevicesPrefersUUIDs(t *testing.T) {
	group := []Device{{Index: 2, UUID: "GPU-x"}, {Index: 5}}
	if diff := cmp.Diff([]string{"GPU-x", "5"}, VisibleDevices(group)); diff != "" {
		t.Errorf("VisibleDevices() (-want +got):\n%s", diff)
	}
}

// TestCUDAIndicesAreNVMLIndices: engines get indices (vLLM before ~0.24
// int()s every entry), never UUIDs.
func TestCUDAIndicesAreNVMLIndices(t *testing.T) {
	group := []Device{{Index: 2, UUID: "GPU-x"}, {Index: 5}}
	if diff := cmp.Diff([]string{"2", "5"}, CUDAIndices(group)); diff != "" {
		t.Errorf("CUDAIndices() (-want +got):\n%s", diff)
	}
}

func node(n int) *int { return &n }

// fakeSysfs writes numa_node files under a temp sysfs PCI root and restores
// sysfsPCI after the test.
func fakeSysfs(t *testing.T, nodes map[string]string) string {
	t.Helper()
	old := sysfsPCI
	t.Cleanup(func() { sysfsPCI = old })
	root := t.TempDir()
	for bus, n := range nodes {
		if err := os.MkdirAll(filepath.Join(root, bus), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, bus, "numa_node"), []byte(n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// fakeSMI writes an executable nvidia-smi stand-in that prints gpus for
// --query-gpu, apps for --query-compute-apps and mig for the MIG query.
func fakeSMI(t *testing.T, gpus, apps string, exit int) string {
	return fakeSMIWithMIG(t, gpus, apps, "", exit)
}

func fakeSMIWithMIG(t *testing.T, gpus, apps, mig string, exit int) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gpus.csv"), []byte(gpus), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "apps.csv"), []byte(apps), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mig.csv"), []byte(mig), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"--query-gpu=index,mig.mode.current) cat " + dir + "/mig.csv ;;\n" +
		"--query-gpu=*) cat " + dir + "/gpus.csv ;;\n" +
		"--query-compute-apps=*) cat " + dir + "/apps.csv ;;\n" +
		"esac\n" + "echo 'NVIDIA-SMI has failed' >&2\nexit " + map[bool]string{true: "0", false: "9"}[exit == 0] + "\n"
	path := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDiscoverFallsBackToNvidiaSMI(t *testing.T) {
	smi := fakeSMIWithMIG(t,
		"0, GPU-aaaa, NVIDIA RTX A4000, 16376, 15000, 00000000:01:00.0\n1, GPU-bbbb, NVIDIA RTX A4000, 16376, [N/A], 00000000:41:00.0\n",
		"GPU-bbbb, 4242, /usr/bin/python3, 14438\nGPU-bbbb, junk, x, 1\n",
		"0, Disabled\n1, Enabled\n", 0)
	sysfsPCI = fakeSysfs(t, map[string]string{"0000:01:00.0": "0", "0000:41:00.0": "-1"})
	noNVML := func() ([]Device, error) { return nil, errors.New("init: ERROR_LIBRARY_NOT_FOUND") }
	got, err := discover(context.Background(), noNVML, smi)
	if err != nil {
		t.Fatalf("discover() error = %v", err)
	}
	want := []Device{
		{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA RTX A4000", MemTotal: 16376 * mib, MemFree: 15000 * mib,
			PCIBusID: "00000000:01:00.0", NUMANode: node(0)},
		{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA RTX A4000", MemTotal: 16376 * mib, PCIBusID: "00000000:41:00.0", MIG: true,
			Processes: []Process{{PID: 4242, Name: "python3", UsedBytes: 14438 * mib}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("discover() (-want +got):\n%s", diff)
	}
}

func TestDiscoverErrNoGPUSaysWhatWasTried(t *testing.T) {
	noNVML := func() ([]Device, error) { return nil, errors.New("init: ERROR_LIBRARY_NOT_FOUND") }
	failing := fakeSMI(t, "", "", 9)
	tests := []struct {
		name string
		smi  string
		want []string
	}{
		{name: "nvidia-smi fails", smi: failing, want: []string{"ERROR_LIBRARY_NOT_FOUND", "NVIDIA-SMI has failed", "--engine sim"}},
		{name: "nvidia-smi missing", smi: filepath.Join(t.TempDir(), "nvidia-smi"), want: []string{"nvidia-smi:", "--engine sim"}},
		{name: "nvidia-smi lists nothing", smi: fakeSMI(t, "", "", 0), want: []string{"nvidia-smi: no devices"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := discover(context.Background(), noNVML, tt.smi)
			if !errors.Is(err, ErrNoGPU) {
				t.Fatalf("discover() error = %v, want ErrNoGPU", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseSMIRejectsGarbage(t *testing.T) {
	if _, err := parseSMIGPUs([]byte("x, y, z, 1, 2, 0000:01:00.0\n")); err == nil {
		t.Error("parseSMIGPUs accepted a non-numeric index")
	}
	if _, err := parseSMIGPUs([]byte("0, only-two\n")); err == nil {
		t.Error("parseSMIGPUs accepted a short row")
	}
}

// TestDiscoverHere runs the real Discover on this machine. CI machines have
// no NVIDIA driver: the answer must be ErrNoGPU, cleanly (no crash from
// calling NVML past a failed Init).
func TestDiscoverHere(t *testing.T) {
	devs, err := Discover(context.Background())
	if err == nil {
		t.Skipf("this machine has %d GPU(s); the no-driver path is covered by the other tests", len(devs))
	}
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Discover() error = %v, want ErrNoGPU", err)
	}
	if !strings.Contains(err.Error(), "--engine sim") {
		t.Errorf("error %q does not name --engine sim", err)
	}
}

func TestWriteJSONAndTable(t *testing.T) {
	devs := fourGPUs()[:2]
	devs[1].Processes = []Process{{PID: 7, Name: "vllm", UsedBytes: 2 * gib}}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, devs); err != nil {
		t.Fatal(err)
	}
	var back []Device
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("WriteJSON output is not JSON: %v\n%s", err, buf.String())
	}
	if diff := cmp.Diff(devs, back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
	if !strings.Contains(buf.String(), `"processes": []`) {
		t.Errorf("a GPU without processes should print an empty list, got:\n%s", buf.String())
	}
	buf.Reset()
	WriteTable(&buf, devs)
	for _, w := range []string{"NVIDIA RTX A4000", "vllm (pid 7, 2.0 GiB)", "16.0 GiB / 16.0 GiB", "GPU-bbbb-1"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, buf.String())
		}
	}
}

package engineplan

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/lmwarden/warden/sim"
)

// fakeHostMemory makes hostMemory return mem for the test, recording
// whether /dev/shm was asked for.
func fakeHostMemory(t *testing.T, mem HostMemory) *bool {
	t.Helper()
	asked := new(bool)
	old := hostMemory
	hostMemory = func(shm bool) (HostMemory, error) {
		*asked = shm
		m := mem
		if !shm {
			m.ShmFree, m.ShmChecked = 0, false
		}
		return m, nil
	}
	t.Cleanup(func() { hostMemory = old })
	return asked
}

func TestOffloadDevicesSizesEveryRank(t *testing.T) {
	const G = 1 << 30
	fakeHostMemory(t, HostMemory{Available: 256 * G, ShmFree: 128 * G, ShmChecked: true})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	v032 := Facts{Version: "0.32.0"}
	for _, c := range []struct {
		engine, setting string
		facts           Facts
		card            uint64
		dp              int
		want            uint64
	}{
		{"vllm", "off", v032, 5 * G, 4, 0},
		// (256 - 64 kept) / 4 = 48, /dev/shm's 0.9 x 128 / 4 = 28.8: a card of 5 GiB wants 4 x 5 = 20.
		{"vllm", "auto", v032, 5 * G, 4, 20 * G},
		// A card of 10 GiB wants 40: /dev/shm caps it at 28.8, in whole 256 MiB.
		{"vllm", "auto", v032, 10 * G, 4, 28*G + 768<<20},
		// vLLM 0.26 pins tensors rounded to a power of two: 4 x 10 = 40 GiB a rank, 32 GiB per worker.
		{"vllm", "auto", Facts{Version: "0.26.0"}, 10 * G, 4, 32 * G},
		// The card not known (the model not here yet): what the host gives.
		{"vllm", "auto", v032, 0, 4, 28*G + 768<<20},
		{"vllm", "20GiB", v032, 5 * G, 4, 20 * G},
	} {
		d := Devices{}
		cfg := Request{Engine: c.engine, KVOffload: c.setting, DP: c.dp, TP: 1}
		if err := offloadDevices(cfg, c.facts, c.card, "test", &d, log); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if d.Offload != c.want {
			t.Errorf("%s %s (vLLM %s, card %.1f GiB): per rank %.3f GiB, want %.3f", c.engine, c.setting, c.facts.Version,
				float64(c.card)/G, float64(d.Offload)/G, float64(c.want)/G)
		}
	}
	if !strings.Contains(logs.String(), "host KV tier (vLLM native KV offloading): 20 GiB a rank") {
		t.Errorf("no log line of the tier:\n%s", logs.String())
	}
	cfg := Request{Engine: "vllm", KVOffload: "64GiB", DP: 4, TP: 1}
	if err := offloadDevices(cfg, v032, 5*G, "test", &Devices{}, log); err == nil || !strings.Contains(err.Error(), "/dev/shm") {
		t.Errorf("4 x 64 GiB into a 128 GiB /dev/shm: %v", err)
	}
	cfg = Request{Engine: "vllm", KVOffload: "auto", DP: 4, TP: 1}
	if err := offloadDevices(cfg, Facts{}, 5*G, "test", &Devices{}, log); err == nil ||
		!strings.Contains(err.Error(), "version could not be read") {
		t.Errorf("auto without the vLLM version: %v", err)
	}
}

// TestOffloadAutoTooSmallRunsWithoutATier: the simulated reference rig on a
// host like this project's (24 GiB): auto would give each of four ranks
// less than a card's KV cache (issue 27 measured 3.75 GiB a rank, a 0.0 %
// hit rate), so it says so, with the numbers, and runs without a tier.
func TestOffloadAutoTooSmallRunsWithoutATier(t *testing.T) {
	const G = 1 << 30
	fakeHostMemory(t, HostMemory{Available: 24 * G})
	var logs bytes.Buffer
	cfg := Request{Engine: "sim", Model: "Qwen/Qwen3-4B-Instruct-2507", KVOffload: "auto", DP: 4, TP: 1,
		Extra: []string{"--sim-profile", "a4000-qwen3-4b-2507-bf16-vllm026-fit"}, SimKVCache: sim.KVCacheBytes}
	d, err := FindDevices(context.Background(), cfg, Facts{}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if d.Offload != 0 {
		t.Errorf("a tier of %.2f GiB a rank, want none", float64(d.Offload)/G)
	}
	for _, want := range []string{"host KV tier off", "a card's KV cache 5.2 GiB (the simulator's profile)",
		"so the engines run without one"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestOffloadHint: the overcommit warning names --kv-offload auto where the
// engines could have a tier and have none, says the host is too small where
// auto found too little, and says nothing on CPU engines or with a tier.
func TestOffloadHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Request
		d    Devices
		want string
	}{
		{"GPU, off", Request{Device: "gpu"}, Devices{}, "--kv-offload auto"},
		{"GPU, auto found too little", Request{Device: "gpu"}, Devices{OffloadPlan: OffloadPlan{Info: "host KV tier off: ..."}}, "cannot give each rank 2 x"},
		{"GPU, a tier", Request{Device: "gpu"}, Devices{Offload: 1 << 34}, ""},
		{"CPU", Request{Device: "cpu"}, Devices{}, ""},
	} {
		got := OffloadHint(tc.cfg, tc.d)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want one with %q", tc.name, got, tc.want)
		}
	}
}

// TestKVOffloadDefaultPlan: the default --kv-offload (auto, serve's
// TestKVOffloadDefault) never stops a start: where an explicit auto is an
// error (the engines' version unknown) it runs without a tier and says why,
// and the overcommit warning points at the start log.
func TestKVOffloadDefaultPlan(t *testing.T) {
	const G = 1 << 30
	fakeHostMemory(t, HostMemory{Available: 256 * G, ShmFree: 128 * G, ShmChecked: true})
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	def := Request{Engine: "vllm", Device: "gpu", KVOffload: "auto", KVOffloadDefault: true, DP: 2, TP: 1}
	d := Devices{}
	if err := offloadDevices(def, Facts{}, 5*G, "test", &d, log); err != nil {
		t.Fatalf("the default auto without the vLLM version stopped the start: %v", err)
	}
	if d.Offload != 0 || !strings.Contains(logs.String(), "host KV tier off (the default --kv-offload auto)") {
		t.Errorf("tier %d, log:\n%s", d.Offload, logs.String())
	}
	if h := OffloadHint(def, d); !strings.Contains(h, "--kv-offload SIZE") {
		t.Errorf("hint %q", h)
	}
	d = Devices{}
	if err := offloadDevices(def, Facts{Version: "0.32.0"}, 5*G, "test", &d, log); err != nil || d.Offload != 20*G {
		t.Errorf("the default on a big host: %v, %.1f GiB a rank, want 20", err, float64(d.Offload)/G)
	}
}

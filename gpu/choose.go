package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/lmwarden/warden/internal/argv"
)

// Request is what `warden serve` asks of the GPUs: dp replicas of tp cards
// each, within CUDA_VISIBLE_DEVICES and --gpus, with room for vLLM's
// --gpu-memory-utilization on every card.
type Request struct {
	DP, TP int
	GPUs   string // --gpus: comma list of indices or UUIDs; "" lets Choose pick

	CUDAVisible     string // the inherited CUDA_VISIBLE_DEVICES
	CUDAVisibleSet  bool   // whether it is set at all ("" set means no GPU)
	CUDADeviceOrder string // the inherited CUDA_DEVICE_ORDER

	Extra       []string // the args after --, where --gpu-memory-utilization may be
	VLLMVersion string   // the installed vLLM's version ("" unknown), for its default utilization

	// ShmFree is the free space of /dev/shm left for the engines' own
	// shared memory; checked only when ShmChecked and TP > 1.
	ShmFree    uint64
	ShmChecked bool
}

// Plan is the cards each rank runs on and what Choose found on the way.
type Plan struct {
	Groups   [][]Device // rank r's cards; each group ordered as CUDA will number them
	Util     float64    // the --gpu-memory-utilization every engine starts with
	UtilFrom string     // where Util comes from, for messages
	Skipped  []string   // cards passed over (busy, MIG), one line each
	Warnings []string   // what may still go wrong (cross-socket groups, /dev/shm)
}

// memMargin is how much less than a card's free memory a suggested
// --gpu-memory-utilization leaves: vLLM measures free memory after its own
// CUDA context (and, with --tp > 1, NCCL) is up (vLLM 0.32.0
// v1/worker/gpu_worker.py takes the snapshot "after NCCL is initialized"),
// which costs a few hundred MiB. The size is a judgement.
const memMargin = 512 << 20

// minUtil is the lowest --gpu-memory-utilization worth suggesting; below it
// a card is as good as full.
const minUtil = 0.05

// Choose picks the cards of every rank, or says why it cannot and what to
// type instead. Rules, in order:
//
//   - CUDA_VISIBLE_DEVICES set but empty means no GPU (as CUDA reads it):
//     refused.
//   - CUDA_VISIBLE_DEVICES and --gpus select from devs as Select does.
//   - vLLM refuses to start on a card whose free memory is below
//     --gpu-memory-utilization x its total (vLLM 0.32.0
//     v1/worker/utils.py, request_memory), and cannot use a card in MIG
//     mode as a whole. Without --gpus such cards are skipped when enough
//     others are left (each logged in Plan.Skipped); otherwise, and for a
//     card --gpus lists, the run is refused with a --gpus list that would
//     work or the largest --gpu-memory-utilization the busiest card allows.
//   - A replica's tp cards are the best-linked ones (NVLink, then one PCIe
//     switch, then host bridge, then across sockets); a group that crosses
//     CPU sockets is warned about, as is a /dev/shm too small for --tp > 1.
func Choose(devs []Device, req Request) (Plan, error) {
	var plan Plan
	if req.DP < 1 || req.TP < 1 {
		return plan, fmt.Errorf("--dp and --tp must be at least 1 (got dp=%d, tp=%d)", req.DP, req.TP)
	}
	if req.CUDAVisibleSet && strings.TrimSpace(req.CUDAVisible) == "" {
		return plan, errors.New(`CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU (CUDA reads "" as none, ` +
			`not all); unset it (unset CUDA_VISIBLE_DEVICES) to use every GPU, or name the cards: ` +
			`CUDA_VISIBLE_DEVICES=0,1 or --gpus 0,1 (warden gpus lists them)`)
	}
	var err error
	if plan.Util, plan.UtilFrom, err = MemoryUtilization(req.Extra, req.VLLMVersion); err != nil {
		return plan, err
	}
	pool, err := Select(devs, req.CUDAVisible, "")
	if err != nil {
		return plan, err
	}
	need := req.DP * req.TP
	var chosen []Device
	if strings.TrimSpace(req.GPUs) != "" {
		if chosen, err = chooseListed(devs, pool, req, plan.Util, plan.UtilFrom); err != nil {
			return plan, err
		}
	} else {
		for _, d := range pool {
			if why := unfit(d, plan.Util); why != "" {
				plan.Skipped = append(plan.Skipped, "skipping "+why)
				continue
			}
			chosen = append(chosen, d)
		}
		if len(chosen) < need {
			return plan, notEnough(pool, chosen, req, plan.Util, plan.UtilFrom)
		}
	}
	plan.Groups = groupByTopology(chosen, req.DP, req.TP)
	for r, g := range plan.Groups {
		if why := crossesSockets(g); why != "" {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("rank %d's GPUs %s span CPU sockets (%s): its "+
				"tensor-parallel all-reduces cross the inter-socket link, which is slower than PCIe within one socket; "+
				"to keep a replica on one socket choose its cards with --gpus (warden gpus shows each card's NUMA node and links)",
				r, joinIndices(g), why))
		}
	}
	if w := shmWarning(req); w != "" {
		plan.Warnings = append(plan.Warnings, w)
	}
	if w := orderWarning(pool, req); w != "" {
		plan.Warnings = append(plan.Warnings, w)
	}
	return plan, nil
}

// chooseListed is Choose's rule for --gpus: every listed card must fit.
func chooseListed(devs, pool []Device, req Request, util float64, from string) ([]Device, error) {
	listed, err := Select(devs, req.CUDAVisible, req.GPUs)
	if err != nil {
		return nil, err
	}
	need := req.DP * req.TP
	if len(listed) < need {
		return nil, fmt.Errorf("need %s (--dp %d x --tp %d) but --gpus %q names %d (%s)",
			gpusN(need), req.DP, req.TP, req.GPUs, len(listed), indexList(listed))
	}
	var bad []string
	var badDevs []Device
	for _, d := range listed {
		if why := unfit(d, util); why != "" {
			bad = append(bad, why)
			badDevs = append(badDevs, d)
		}
	}
	if len(bad) == 0 {
		return listed, nil
	}
	msg := fmt.Sprintf("--gpus %s: %s", req.GPUs, strings.Join(bad, "; "))
	var fixes []string
	// A --gpus list that works: the listed cards that fit, then the others.
	var good []Device
	for _, set := range [][]Device{listed, pool} {
		for _, d := range set {
			if unfit(d, util) == "" && !contains(good, d) && len(good) < need {
				good = append(good, d)
			}
		}
	}
	if len(good) == need {
		fixes = append(fixes, "--gpus "+joinIndices(good)+" (cards with room)")
	}
	if s, ok := suggestUtil(listed[:need], util); ok {
		fixes = append(fixes, fmt.Sprintf("-- --gpu-memory-utilization %.2f (the most %s leaves room for; the KV cache shrinks with it)",
			s, busiest(listed[:need])))
	}
	fixes = append(fixes, otherFixes(badDevs)...)
	return nil, fmt.Errorf("%s (--gpu-memory-utilization %s); instead: %s", msg, from, strings.Join(fixes, "; or "))
}

// notEnough is the refusal when too few cards of pool fit.
func notEnough(pool, fit []Device, req Request, util float64, from string) error {
	need := req.DP * req.TP
	if len(pool) < need {
		return fmt.Errorf("need %s (--dp %d x --tp %d) but %d are available (%s); "+
			"lower --dp/--tp, check --gpus and CUDA_VISIBLE_DEVICES, or use --engine sim",
			gpusN(need), req.DP, req.TP, len(pool), indexList(pool))
	}
	var reasons []string
	var bad []Device
	for _, d := range pool {
		if why := unfit(d, util); why != "" {
			reasons = append(reasons, why)
			bad = append(bad, d)
		}
	}
	have := "none has"
	if len(fit) > 0 {
		have = "only " + indexList(fit) + " "
		if len(fit) == 1 {
			have += "has"
		} else {
			have += "have"
		}
	}
	msg := fmt.Sprintf("need %s (--dp %d x --tp %d) with room for vLLM (--gpu-memory-utilization %s) but %s it: %s",
		gpusN(need), req.DP, req.TP, from, have, strings.Join(reasons, "; "))
	var fixes []string
	// The need non-MIG cards with the most room, and what they all allow.
	var cands []Device
	for _, d := range pool {
		if !d.MIG {
			cands = append(cands, d)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return freeShare(cands[i]) > freeShare(cands[j]) })
	if len(cands) >= need {
		use := inPoolOrder(pool, cands[:need])
		if s, ok := suggestUtil(use, util); ok {
			gpus := ""
			if len(pool) > need {
				gpus = "--gpus " + joinIndices(use) + " "
			}
			fixes = append(fixes, fmt.Sprintf("%s-- --gpu-memory-utilization %.2f (the most %s leaves room for; the KV cache shrinks with it)",
				gpus, s, busiest(use)))
		}
	}
	if n := len(fit) / req.TP; n >= 1 && n < req.DP {
		fixes = append(fixes, fmt.Sprintf("--dp %d (the replicas that fit)", n))
	}
	fixes = append(fixes, otherFixes(bad)...)
	return fmt.Errorf("%s; instead: %s", msg, strings.Join(fixes, "; or "))
}

// otherFixes are the remedies that need no flag: stop what holds a busy
// card, disable MIG.
func otherFixes(bad []Device) []string {
	var busy, mig []string
	for _, d := range bad {
		if d.MIG {
			mig = append(mig, fmt.Sprintf("sudo nvidia-smi -i %d -mig 0", d.Index))
		} else {
			busy = append(busy, strconv.Itoa(d.Index))
		}
	}
	var out []string
	if len(busy) > 0 {
		out = append(out, "stop what holds GPU "+strings.Join(busy, ", ")+" (warden gpus lists the processes it can see)")
	}
	if len(mig) > 0 {
		out = append(out, "disable MIG ("+strings.Join(mig, "; ")+", with no process on the card; some cards need a reset or reboot after)")
	}
	return out
}

// unfit says why vLLM cannot start on d with util, "" when it can. A card
// whose memory is unknown (nvidia-smi [N/A]) is taken to fit.
func unfit(d Device, util float64) string {
	if d.MIG {
		return fmt.Sprintf("GPU %d: MIG mode is enabled, and vLLM cannot use a MIG-enabled card as a whole "+
			"(pick other cards with --gpus, or disable MIG: sudo nvidia-smi -i %d -mig 0)", d.Index, d.Index)
	}
	if d.MemTotal == 0 {
		return ""
	}
	needed := neededBytes(d, util)
	if d.MemFree >= needed {
		return ""
	}
	why := fmt.Sprintf("GPU %d: %s free of %s, vLLM needs %s (%.2f x %s)",
		d.Index, GiB(d.MemFree), GiB(d.MemTotal), GiB(needed), util, GiB(d.MemTotal))
	if users := holders(d); users != "" {
		why += ", " + users
	}
	return why
}

// neededBytes is what vLLM requires free on d: ceil(total x util), as
// vLLM 0.32.0's request_memory computes it.
func neededBytes(d Device, util float64) uint64 {
	return uint64(math.Ceil(float64(d.MemTotal) * util))
}

// holders names what uses d's memory: "in use by python3 (pid 12, 3.0 GiB)".
func holders(d Device) string {
	var parts []string
	for _, p := range d.Processes {
		name := p.Name
		if name == "" {
			name = "an unknown process"
		}
		s := fmt.Sprintf("%s (pid %d", name, p.PID)
		if p.UsedBytes > 0 {
			s += ", " + GiB(p.UsedBytes)
		}
		parts = append(parts, s+")")
	}
	if len(parts) > 0 {
		return "in use by " + strings.Join(parts, ", ")
	}
	if d.MemTotal-min(d.MemFree, d.MemTotal) > busyUnseen {
		return "in use by processes not visible here (another container?)"
	}
	return ""
}

// freeShare is the fraction of d's memory that is free (1 when unknown).
func freeShare(d Device) float64 {
	if d.MemTotal == 0 {
		return 1
	}
	return float64(d.MemFree) / float64(d.MemTotal)
}

// suggestUtil is the largest --gpu-memory-utilization, in hundredths, that
// every card of devs has room for with memMargin to spare; ok is false when
// that is not below util or too small to be of use.
func suggestUtil(devs []Device, util float64) (float64, bool) {
	best := 1.0
	for _, d := range devs {
		if d.MIG {
			return 0, false
		}
		if d.MemTotal == 0 {
			continue
		}
		free := float64(d.MemFree) - memMargin
		best = min(best, free/float64(d.MemTotal))
	}
	s := math.Floor(best*100) / 100
	if s < minUtil || s >= util {
		return 0, false
	}
	return s, true
}

// busiest names the card of devs with the least free share.
func busiest(devs []Device) string {
	b := devs[0]
	for _, d := range devs[1:] {
		if freeShare(d) < freeShare(b) {
			b = d
		}
	}
	return fmt.Sprintf("GPU %d (%s free of %s)", b.Index, GiB(b.MemFree), GiB(b.MemTotal))
}

func contains(devs []Device, d Device) bool {
	for _, x := range devs {
		if x.Index == d.Index {
			return true
		}
	}
	return false
}

// inPoolOrder returns the cards of sub in the order pool has them.
func inPoolOrder(pool, sub []Device) []Device {
	var out []Device
	for _, d := range pool {
		if contains(sub, d) {
			out = append(out, d)
		}
	}
	return out
}

// gpusN is "1 GPU", "4 GPUs".
func gpusN(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

func joinIndices(devs []Device) string {
	return strings.Join(CUDAIndices(devs), ",")
}

// utilFlags are the spellings of vLLM's --gpu-memory-utilization (0.32.0
// engine/arg_utils.py adds --device-memory-utilization as an alias; its
// parser reads underscores as dashes).
var utilFlags = []string{"--gpu-memory-utilization", "--device-memory-utilization",
	"--gpu_memory_utilization", "--device_memory_utilization"}

// MemoryUtilization is the --gpu-memory-utilization the engines start
// with: the last one in extra (the args after --, "--flag V" or
// "--flag=V"), else vLLM's default for version. from says which, for
// messages: "0.8, given after --" or "0.92, vLLM 0.32.0's default".
func MemoryUtilization(extra []string, version string) (util float64, from string, err error) {
	raw, found := argv.Value(extra, utilFlags...)
	if found {
		util, err = strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || util <= 0 || util > 1 || math.IsNaN(util) {
			return 0, "", fmt.Errorf("--gpu-memory-utilization %q after --: want a fraction in (0, 1], e.g. 0.8", raw)
		}
		return util, fmt.Sprintf("%.2f, given after --", util), nil
	}
	util = DefaultMemoryUtilization(version)
	switch {
	case version == "":
		from = fmt.Sprintf("%.2f, vLLM 0.32's default; the installed version is unknown", util)
	default:
		from = fmt.Sprintf("%.2f, vLLM %s's default", util, version)
	}
	return util, from, nil
}

// DefaultMemoryUtilization is vLLM's default --gpu-memory-utilization: 0.92
// from 0.20.0 (config/cache.py, CacheConfig.gpu_memory_utilization; read in
// the PyPI wheels of 0.8.5 to 0.33.0), 0.9 before; an unknown version gets
// 0.92.
func DefaultMemoryUtilization(version string) float64 {
	if major, minor, ok := majorMinor(version); ok && major == 0 && minor < 20 {
		return 0.90
	}
	return 0.92
}

// majorMinor reads "0.32.0+cpu" as 0, 32.
func majorMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(v), "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(parts[0])
	minor, err2 = strconv.Atoi(leadingDigits(parts[1])) // "0rc1" reads as 0
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}

func leadingDigits(s string) string {
	for i, r := range s {
		if r < '0' || r > '9' {
			return s[:i]
		}
	}
	return s
}

// orderWarning warns when CUDA_VISIBLE_DEVICES names cards by index on a
// machine with different cards and no CUDA_DEVICE_ORDER=PCI_BUS_ID: the
// warden reads the indices as nvidia-smi numbers them (so does vLLM 0.32.0,
// platforms/interface.py: "physical" ids are NVML's), but CUDA programs
// started from this shell number them fastest first.
func orderWarning(pool []Device, req Request) string {
	if !req.CUDAVisibleSet || req.CUDADeviceOrder == "PCI_BUS_ID" {
		return ""
	}
	byIndex := false
	for _, e := range strings.Split(req.CUDAVisible, ",") {
		if _, err := strconv.Atoi(strings.TrimSpace(e)); err == nil {
			byIndex = true
		}
	}
	names := map[string]bool{}
	for _, d := range pool {
		names[d.Name] = true
	}
	if !byIndex || len(names) < 2 {
		return ""
	}
	return fmt.Sprintf("CUDA_VISIBLE_DEVICES=%s is read in nvidia-smi's order (PCI bus), as the engines will read it "+
		"(the warden sets CUDA_DEVICE_ORDER=PCI_BUS_ID for them); without that variable CUDA numbers cards fastest first, "+
		"so other programs in this shell may mean different cards by these indices; UUIDs are unambiguous",
		req.CUDAVisible)
}

// Log writes the plan: skipped cards (info), warnings, busy cards, and one
// line per rank with what the engine gets in CUDA_VISIBLE_DEVICES and, for
// humans, the cards' UUIDs, PCI bus ids and link.
func (p Plan) Log(log *slog.Logger) {
	for _, s := range p.Skipped {
		log.Info(s)
	}
	for _, w := range p.Warnings {
		log.Warn(w)
	}
	for _, w := range BusyWarnings(p.Groups) {
		log.Warn(w)
	}
	for r, g := range p.Groups {
		attrs := []any{"rank", r, "CUDA_VISIBLE_DEVICES", strings.Join(CUDAIndices(g), ","),
			"uuids", strings.Join(VisibleDevices(g), ","), "pci", busIDs(g), "name", g[0].Name,
			"gpu_memory_utilization", p.Util}
		if len(g) > 1 {
			attrs = append(attrs, "link", groupPath(g))
		}
		log.Info("rank GPUs", attrs...)
	}
}

func busIDs(g []Device) string {
	out := make([]string, len(g))
	for i, d := range g {
		out[i] = d.PCIBusID
		if out[i] == "" {
			out[i] = "?"
		}
	}
	return strings.Join(out, ",")
}

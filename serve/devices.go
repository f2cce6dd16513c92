package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"

	"github.com/lmwarden/warden/gpu"
	"github.com/lmwarden/warden/hostcpu"
	"github.com/lmwarden/warden/internal/exit"
)

// devicesReport is what `warden devices` found.
type devicesReport struct {
	GPUs       []gpu.Device     `json:"gpus"`
	GPUError   string           `json:"gpu_error,omitempty"`
	CPU        hostcpu.Topology `json:"cpu"`
	MemAvail   uint64           `json:"mem_available_bytes"`
	DP         int              `json:"dp,omitempty"`
	Ranks      []hostcpu.Set    `json:"cpu_ranks,omitempty"` // what --device cpu --dp N would use
	KVPerRank  uint64           `json:"cpu_kv_cache_per_rank_bytes,omitempty"`
	CPUDPError string           `json:"cpu_dp_error,omitempty"`
}

// DevicesOptions are `warden devices`'s flags.
type DevicesOptions struct {
	DP         int    // show the CPU split for this many ranks (0: none)
	CPUKVCache string // KV cache per rank for the split, as serve's --cpu-kv-cache
	JSON       bool
}

// Devices is `warden devices`: the GPUs and the CPUs the warden sees, and
// with DP what each rank of `serve --device cpu` would get, as tables or
// JSON on w.
func Devices(ctx context.Context, o DevicesOptions, w io.Writer) error {
	rep := devicesReport{DP: o.DP}
	var err error
	if rep.GPUs, err = gpu.Discover(ctx); err != nil {
		rep.GPUError = err.Error()
	}
	if rep.CPU, err = hostcpu.Discover(); err != nil {
		return exit.New(1, "warden devices: "+err.Error())
	}
	if rep.MemAvail, err = hostcpu.Available(); err != nil {
		return exit.New(1, "warden devices: reading the memory available: "+err.Error())
	}
	if rep.DP > 0 {
		if rep.Ranks, err = hostcpu.Split(rep.CPU, rep.DP); err != nil {
			rep.CPUDPError = err.Error()
		} else if rep.KVPerRank, _, err = hostcpu.KVCache(o.CPUKVCache, rep.DP, rep.MemAvail); err != nil {
			rep.CPUDPError = err.Error()
		}
	}
	if o.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeDevices(w, rep)
	return nil
}

func writeDevices(w io.Writer, rep devicesReport) {
	if rep.GPUError != "" {
		fmt.Fprintf(w, "GPUs: none (%s)\n", rep.GPUError)
	} else {
		fmt.Fprintln(w, "GPUs:")
		gpu.WriteTable(w, rep.GPUs)
	}
	cores := rep.CPU.Cores()
	fmt.Fprintf(w, "\nCPUs: %d physical cores, %d logical CPUs the warden may use (%d online); %s of memory available\n",
		len(cores), len(rep.CPU.CPUs), rep.CPU.Online, hostcpu.Bytes(rep.MemAvail))
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	t.AppendHeader(table.Row{"NUMA node", "CPUs", "Memory free / total"})
	for _, n := range rep.CPU.Nodes {
		mem := "-"
		if n.MemTotal > 0 {
			mem = hostcpu.Bytes(n.MemFree) + " / " + hostcpu.Bytes(n.MemTotal)
		}
		t.AppendRow(table.Row{n.ID, hostcpu.FormatList(n.CPUs), mem})
	}
	t.Render()
	if rep.DP == 0 {
		return
	}
	if rep.CPUDPError != "" {
		fmt.Fprintf(w, "\n--device cpu --dp %d: %s\n", rep.DP, rep.CPUDPError)
		return
	}
	fmt.Fprintf(w, "\n--device cpu --dp %d: each rank's engine\n", rep.DP)
	t = table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	t.AppendHeader(table.Row{"rank", "CPUs (affinity)", "compute threads on", "NUMA", "KV cache"})
	for _, s := range rep.Ranks {
		nodes := make([]string, len(s.Nodes))
		for i, n := range s.Nodes {
			nodes[i] = fmt.Sprint(n)
		}
		t.AppendRow(table.Row{s.Rank, hostcpu.FormatList(s.CPUs), hostcpu.FormatList(s.Bind), strings.Join(nodes, ","), hostcpu.Bytes(rep.KVPerRank)})
	}
	t.Render()
}

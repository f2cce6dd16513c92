package gpu

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
)

// WriteJSON writes devs as an indented JSON array (never null).
func WriteJSON(w io.Writer, devs []Device) error {
	if devs == nil {
		devs = []Device{}
	}
	for i := range devs {
		if devs[i].Processes == nil {
			devs[i].Processes = []Process{}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(devs); err != nil {
		return fmt.Errorf("gpus: write json: %w", err)
	}
	return nil
}

// WriteTable writes devs as a text table, one row per GPU, and, when the
// driver reports how the cards are linked, a matrix of the links in
// nvidia-smi topo -m's notation.
func WriteTable(w io.Writer, devs []Device) {
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	t.AppendHeader(table.Row{"GPU", "Name", "Memory free / total", "Processes", "PCI bus (NUMA)", "UUID"})
	for _, d := range devs {
		name := d.Name
		if d.MIG {
			name += "\nMIG enabled: not usable whole"
		}
		bus := d.PCIBusID
		if bus == "" {
			bus = "-"
		}
		if d.NUMANode != nil {
			bus += fmt.Sprintf(" (node %d)", *d.NUMANode)
		}
		t.AppendRow(table.Row{
			strconv.Itoa(d.Index), name,
			GiB(d.MemFree) + " / " + GiB(d.MemTotal),
			procList(d.Processes), bus, d.UUID,
		})
	}
	t.Render()
	writeLinks(w, devs)
}

// writeLinks writes the link matrix, nothing when no card has links.
func writeLinks(w io.Writer, devs []Device) {
	known := false
	for _, d := range devs {
		known = known || len(d.Links) > 0
	}
	if !known {
		return
	}
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	head := table.Row{"links"}
	for _, d := range devs {
		head = append(head, "GPU "+strconv.Itoa(d.Index))
	}
	t.AppendHeader(head)
	for _, a := range devs {
		row := table.Row{"GPU " + strconv.Itoa(a.Index)}
		for _, b := range devs {
			p := path(a, b)
			switch {
			case a.Index == b.Index:
				p = "X"
			case p == "":
				p = "?"
			}
			row = append(row, p)
		}
		t.AppendRow(row)
	}
	t.Render()
	fmt.Fprintln(w, "NV#: NVLinks; PIX: one PCIe switch; PXB: several; PHB: the CPU's host bridge; "+
		"NODE: within one NUMA node; SYS: across CPU sockets")
}

func procList(ps []Process) string {
	if len(ps) == 0 {
		return "-"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		name := p.Name
		if name == "" {
			name = "?"
		}
		parts[i] = fmt.Sprintf("%s (pid %d, %s)", name, p.PID, GiB(p.UsedBytes))
	}
	return strings.Join(parts, "\n")
}

package gpu

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/urfave/cli/v2"
)

// Command returns the `warden gpus` command: the GPUs NVML (or nvidia-smi)
// reports, with memory and the processes on each, as a table or --json.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "gpus",
		Usage: "list NVIDIA GPUs (index, name, memory, processes) as warden sees them",
		Flags: []cli.Flag{
			&cli.BoolFlag{
				Name:    "json",
				Usage:   "print the GPUs as a JSON array instead of a table",
				EnvVars: []string{"WARDEN_GPUS_JSON"},
			},
		},
		Action: func(c *cli.Context) error {
			devs, err := Discover(c.Context)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			if c.Bool("json") {
				return WriteJSON(c.App.Writer, devs)
			}
			WriteTable(c.App.Writer, devs)
			return nil
		},
	}
}

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

// WriteTable writes devs as a text table, one row per GPU.
func WriteTable(w io.Writer, devs []Device) {
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	t.AppendHeader(table.Row{"GPU", "Name", "Memory free / total", "Processes", "UUID"})
	for _, d := range devs {
		t.AppendRow(table.Row{
			strconv.Itoa(d.Index), d.Name,
			GiB(d.MemFree) + " / " + GiB(d.MemTotal),
			procList(d.Processes), d.UUID,
		})
	}
	t.Render()
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

package gpu

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	smiGPUQuery  = "--query-gpu=index,uuid,name,memory.total,memory.free,pci.bus_id"
	smiMIGQuery  = "--query-gpu=index,mig.mode.current"
	smiAppsQuery = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
	smiFormat    = "--format=csv,noheader,nounits"
	smiTimeout   = 20 * time.Second
	mib          = 1 << 20
)

// discoverSMI lists GPUs with nvidia-smi (the fallback where NVML cannot be
// loaded, e.g. a CGO_ENABLED=0 build). Memory is reported in MiB.
func discoverSMI(ctx context.Context, smi string) ([]Device, error) {
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	out, err := runSMI(ctx, smi, smiGPUQuery)
	if err != nil {
		return nil, err
	}
	devs, err := parseSMIGPUs(out)
	if err != nil {
		return nil, err
	}
	if apps, err := runSMI(ctx, smi, smiAppsQuery); err == nil {
		// Processes are best effort: a GPU list without them is still useful.
		_ = attachSMIApps(devs, apps)
	}
	if mig, err := runSMI(ctx, smi, smiMIGQuery); err == nil {
		_ = attachSMIMIG(devs, mig) // best effort too: older nvidia-smi lack the field
	}
	for i := range devs {
		devs[i].NUMANode = sysfsNUMANode(sysfsPCI, devs[i].PCIBusID)
	}
	return devs, nil
}

// attachSMIMIG marks the devices whose `index, mig.mode.current` row says
// Enabled ("Disabled" and "[N/A]" leave them whole).
func attachSMIMIG(devs []Device, out []byte) error {
	rows, err := readCSV(out, 2)
	if err != nil {
		return err
	}
	for _, rec := range rows {
		idx, err := strconv.Atoi(rec[0])
		if err != nil {
			continue
		}
		for i := range devs {
			if devs[i].Index == idx {
				devs[i].MIG = strings.EqualFold(rec[1], "Enabled")
			}
		}
	}
	return nil
}

func runSMI(ctx context.Context, smi, query string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, smi, query, smiFormat)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String() + " " + string(out))
		if msg != "" {
			return nil, fmt.Errorf("%s %s: %w: %s", smi, query, err, msg)
		}
		return nil, fmt.Errorf("%s %s: %w", smi, query, err)
	}
	return out, nil
}

func readCSV(out []byte, fields int) ([][]string, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = fields
	var rows [][]string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("unexpected nvidia-smi output: %w", err)
		}
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		rows = append(rows, rec)
	}
}

// parseSMIGPUs parses `index, uuid, name, memory.total, memory.free,
// pci.bus_id` rows.
func parseSMIGPUs(out []byte) ([]Device, error) {
	rows, err := readCSV(out, 6)
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(rows))
	for _, rec := range rows {
		idx, err := strconv.Atoi(rec[0])
		if err != nil {
			return nil, fmt.Errorf("unexpected nvidia-smi GPU index %q", rec[0])
		}
		devs = append(devs, Device{
			Index: idx, UUID: rec[1], Name: rec[2],
			MemTotal: parseMiB(rec[3]), MemFree: parseMiB(rec[4]), PCIBusID: rec[5],
		})
	}
	return devs, nil
}

// attachSMIApps adds `gpu_uuid, pid, process_name, used_memory` rows to the
// matching devices.
func attachSMIApps(devs []Device, out []byte) error {
	rows, err := readCSV(out, 4)
	if err != nil {
		return err
	}
	for _, rec := range rows {
		pid, err := strconv.Atoi(rec[1])
		if err != nil {
			continue
		}
		for i := range devs {
			if devs[i].UUID == rec[0] {
				devs[i].Processes = append(devs[i].Processes, Process{
					PID: pid, Name: filepath.Base(rec[2]), UsedBytes: parseMiB(rec[3]),
				})
			}
		}
	}
	return nil
}

// parseMiB reads a MiB count; "[N/A]" and the like read as 0.
func parseMiB(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n * mib
}

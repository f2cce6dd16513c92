package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sysfsPCI is where Linux lists PCI devices; a variable for tests.
var sysfsPCI = "/sys/bus/pci/devices"

// normBus writes a PCI bus id as sysfs names it: lower case, a 4-digit
// domain ("00000000:01:00.0" -> "0000:01:00.0"); "" stays "".
func normBus(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return id
	}
	n, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return id
	}
	d := strconv.FormatUint(n, 16)
	for len(d) < 4 {
		d = "0" + d
	}
	return d + ":" + rest
}

// sysfsNUMANode reads the NUMA node of the PCI device bus from sysfs; nil
// when unknown (no such file, or -1: the machine has one node or does not
// say).
func sysfsNUMANode(root, bus string) *int {
	if bus == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(root, normBus(bus), "numa_node"))
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return nil
	}
	return &n
}

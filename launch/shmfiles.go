package launch

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Host KV tier files. vLLM 0.27 and later back an engine's host KV tier with
// one file, /dev/shm/vllm_offload_<uuid>.mmap, that every worker maps; 0.27
// and 0.28 unlink it only on a clean exit, so an engine that is killed (the
// OOM killer, a crash, SIGKILL at the end of --stop-grace) leaves the whole
// tier in /dev/shm, and restarts pile them up until vLLM fails with "Bad
// address" (0.29 unlinks the file once it is mapped; docs/kv-offload.md). The
// warden notes the files an engine maps once it is healthy and removes any
// that are left when the engine's processes are gone.

// offloadFilePrefix starts the name of vLLM's tier file.
const offloadFilePrefix = "vllm_offload_"

// mappedOffloadFiles lists the tier files that the processes pids map (read
// from /proc/PID/maps), still linked in the file system.
func mappedOffloadFiles(pids []int) []string {
	seen := map[string]bool{}
	var out []string
	for _, pid := range pids {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 4096), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			i := strings.IndexByte(line, '/')
			if i < 0 || strings.HasSuffix(line, " (deleted)") {
				continue
			}
			path := line[i:]
			if strings.HasPrefix(filepath.Base(path), offloadFilePrefix) && !seen[path] {
				seen[path] = true
				out = append(out, path)
			}
		}
		f.Close()
	}
	return out
}

// noteOffloadFiles records the tier files of p's process tree.
func (p *proc) noteOffloadFiles(ctx context.Context) {
	pids := []int{p.pid}
	for _, k := range descendants(ctx, p.pid) {
		pids = append(pids, int(k.Pid))
	}
	p.shmFiles = mappedOffloadFiles(pids)
}

// removeOffloadFiles removes the tier files p's processes left behind; it
// is called once they are all gone. It returns what it removed.
func (p *proc) removeOffloadFiles() []string {
	var removed []string
	for _, path := range p.shmFiles {
		if os.Remove(path) == nil { // gone already after a clean exit, or on vLLM 0.29+
			removed = append(removed, path)
		}
	}
	return removed
}

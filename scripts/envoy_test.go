// Package scripts holds the project's shell entry points; its tests run
// them against fakes.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// envoy.sh's no-op check holds under pipefail even when the installed
// envoy writes more after its version than grep needs (issue 45: grep -q
// closing the pipe early made the check fail about half the time, and the
// script reinstalled). The fake envoy writes its version line, then 1 MiB;
// python3 on PATH fails, so a reinstall attempt fails the test.
func TestEnvoyScriptNoOpWhenInstalled(t *testing.T) {
	root := t.TempDir()
	script, err := os.ReadFile("envoy.sh")
	if err != nil {
		t.Fatal(err)
	}
	write := func(path, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "scripts", "envoy.sh"), string(script))
	write(filepath.Join(root, ".envoy", "bin", "envoy"), `#!/bin/sh
echo "envoy  version: 0123abcd/1.40.0/Clean/RELEASE/BoringSSL"
head -c 1048576 /dev/zero | tr '\0' 'x'
echo
`)
	fakeBin := filepath.Join(root, "fakebin")
	write(filepath.Join(fakeBin, "python3"), "#!/bin/sh\necho 'python3 called: envoy.sh tried to reinstall' >&2\nexit 1\n")
	for i := range 5 {
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "envoy.sh"))
		cmd.Env = append(os.Environ(), "PATH="+fakeBin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "envoy: 1.40.0/Clean/RELEASE already at .envoy/bin/envoy") {
			t.Fatalf("run %d: %v\n%s", i+1, err, out)
		}
	}
}

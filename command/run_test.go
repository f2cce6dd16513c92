package command

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunURLFromTheEnvironment: --url given with --serve is a usage error;
// the same URL from WARDEN_URL alone is not (the missing agent is found
// before anything starts: 127, not 2).
func TestRunURLFromTheEnvironment(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err := runWarden(t, "run", "claude", "--url", "http://127.0.0.1:1", "--serve", "--dp 2", "--agent-bin", bin)
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "--serve starts a warden of its own") {
		t.Errorf("--url with --serve: %v (code %d)", err, exitCode(err))
	}
	t.Setenv("WARDEN_URL", "http://127.0.0.1:1")
	if _, _, err := runWarden(t, "run", "claude", "--serve", "--dp 2", "--agent-bin", "/nonexistent/agent"); exitCode(err) != 127 {
		t.Errorf("WARDEN_URL with --serve: %v (code %d), want 127", err, exitCode(err))
	}
}

// TestRunExitsWithTheAgentsStatus: the agent's exit status is warden's,
// with nothing printed for it; its arguments after -- are its own.
func TestRunExitsWithTheAgentsStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","max_model_len":8192}]}`)
		default:
			http.NotFound(w, r) // no status (not a warden's), no tool probe answered: tools unknown
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"$@\" > "+dir+"/args\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runWarden(t, "run", "codex", "--url", srv.URL, "--agent-bin", bin, "--", "exec", "hi")
	if exitCode(err) != 3 || err.Error() != "" {
		t.Fatalf("exit %d (%v), want the agent's 3 and no message\n%s", exitCode(err), err, stderr)
	}
	if args, _ := os.ReadFile(filepath.Join(dir, "args")); !strings.HasSuffix(strings.TrimSpace(string(args)), "exec hi") {
		t.Errorf("agent's args %q", args)
	}
}

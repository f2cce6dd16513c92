package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/engineplan"
	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/launch"
)

// The container tier: `warden serve --image` against the real Docker
// daemon, with an image built here FROM scratch around the warden itself,
// statically linked, whose entry point is shaped like vLLM's image's
// (`vllm serve` takes MODEL and the flags; here `warden sim serve` does).
// No registry is needed. It skips, saying why, where no daemon answers;
// WARDEN_REQUIRE_DOCKER=1 (.ci/run) turns the skip into a failure.

// needDocker skips the test, saying why, where no Docker daemon answers.
func needDocker(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("no Docker daemon (docker info: %v: %s); .ci/run installs and starts one", err, strings.TrimSpace(string(out)))
		if os.Getenv("WARDEN_REQUIRE_DOCKER") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// testImage builds the image and returns its tag; it is removed after the test.
func testImage(t *testing.T) string {
	t.Helper()
	needDocker(t)
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "warden"), "github.com/lmwarden/warden")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build of the warden: %v\n%s", err, out)
	}
	dockerfile := "FROM scratch\nCOPY warden /warden\n" +
		"LABEL " + engineplan.LabelVLLMVersion + "=0.32.0\n" +
		`ENTRYPOINT ["/warden", "sim", "serve"]` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := "warden-test-sim:" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("docker", "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	return tag
}

// containersOf lists the names of the containers the warden with pid
// owns (its owner label, engineplan.LabelOwner: host/pid/start), running
// or not.
func containersOf(t *testing.T, pid int) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label="+engineplan.LabelOwner,
		"--format", `{{.Names}}|{{.Label "`+engineplan.LabelOwner+`"}}`).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, owner, ok := strings.Cut(line, "|")
		if ok && strings.Contains(owner, "/"+strconv.Itoa(pid)+"/") {
			names = append(names, name)
		}
	}
	return names
}

// startImageServe runs `warden serve --image tag --device cpu --dp 2`.
func startImageServe(t *testing.T, tag string) *wardenProc {
	t.Helper()
	port := simproc.FreePort(t)
	w := startWarden(t, "http://127.0.0.1:"+strconv.Itoa(port), "serve", "--model", "demo", "--image", tag,
		"--device", "cpu", "--cpu-kv-cache", "256MiB", "--dp", "2", "--port", strconv.Itoa(port),
		"--log-dir", t.TempDir(), "--stop-grace", "5s")
	t.Cleanup(func() {
		for _, c := range containersOf(t, w.cmd.Process.Pid) {
			_ = exec.Command("docker", "rm", "-f", c).Run()
		}
	})
	return w
}

// TestServeImage: two ranks from the image serve, a conversation stays on
// one, a killed container is restarted, Ctrl-C leaves no container, and a
// SIGKILLed warden's containers are removed by the next start.
func TestServeImage(t *testing.T) {
	tag := testImage(t)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_TOKEN", "hf_test_secret_never_in_argv")

	w := startImageServe(t, tag)
	names := containersOf(t, w.cmd.Process.Pid)
	if len(names) != 2 {
		t.Fatalf("want 2 containers of the warden, got %v\n%s", names, w.stderr)
	}
	st := w.status(t)
	if len(st.Replicas) != 2 || !st.Replicas[0].Up || !st.Replicas[1].Up {
		t.Fatalf("want 2 ranks up, got %+v", st.Replicas)
	}
	if !strings.Contains(w.stderr.String(), `vllm_version=0.32.0 read_from="the image's label`) {
		t.Errorf("the image's vLLM version was not read from its label:\n%s", w.stderr)
	}

	// One conversation, three turns: one replica answers all of them.
	session := map[string]string{"X-Claude-Code-Session-Id": "6f0b8a52-61d9-4c5e-9d2a-3b1c5e7f9a10"}
	history := `{"role":"user","content":"Refactor the parser in this repository, step by step."}`
	var replicas []string
	for turn := range 3 {
		resp, body := post(t, w.url+"/v1/chat/completions",
			`{"model":"demo","max_tokens":8,"messages":[`+history+`]}`, session)
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: %s\n%s", turn, resp.Status, body)
		}
		replicas = append(replicas, resp.Header.Get("X-Warden-Replica"))
		history += `,{"role":"assistant","content":"ok"},{"role":"user","content":"next step ` + strconv.Itoa(turn) + `"}`
	}
	if replicas[0] == "" || replicas[1] != replicas[0] || replicas[2] != replicas[0] {
		t.Errorf("the conversation moved between replicas: %v", replicas)
	}

	// A container that dies is restarted, as an engine process is.
	if out, err := exec.Command("docker", "kill", names[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker kill %s: %v %s", names[0], err, out)
	}
	simproc.Poll(t, "the killed rank's restart", func() bool {
		st := w.status(t)
		return st.Replicas[0].Restarts+st.Replicas[1].Restarts == 1 && st.Replicas[0].Up && st.Replicas[1].Up
	})

	w.stop(t)
	if left := containersOf(t, w.cmd.Process.Pid); len(left) != 0 {
		t.Errorf("Ctrl-C left containers: %v", left)
	}
	if strings.Contains(w.stderr.String(), "hf_test_secret") {
		t.Errorf("HF_TOKEN's value reached the warden's output")
	}

	// A SIGKILLed warden cannot remove its containers: the next start does.
	killed := startImageServe(t, tag)
	pid := killed.cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-killed.done
	left := containersOf(t, pid)
	if len(left) != 2 {
		t.Fatalf("want the killed warden's 2 containers still there, got %v", left)
	}
	next := startImageServe(t, tag)
	if got := containersOf(t, pid); len(got) != 0 {
		t.Errorf("the next start left the killed warden's containers: %v", got)
	}
	for _, want := range append([]string{"removed 2 engine containers that a warden which is gone left behind"}, left...) {
		if !strings.Contains(next.stderr.String(), want) {
			t.Errorf("the next start's log lacks %q:\n%s", want, next.stderr)
		}
	}
	next.stop(t)
	if left := containersOf(t, next.cmd.Process.Pid); len(left) != 0 {
		t.Errorf("Ctrl-C left containers: %v", left)
	}
}

// TestServeImageNotFound: an image that is neither here nor pullable stops
// the start before any engine, naming the image and what to do.
func TestServeImageNotFound(t *testing.T) {
	needDocker(t)
	port := strconv.Itoa(simproc.FreePort(t))
	cmd := exec.Command(simproc.Binary(t), "serve", "--model", "demo", "--image", "warden-test-missing:"+port,
		"--device", "cpu", "--port", port, "--log-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "image warden-test-missing:"+port+" is not on this host and could not be pulled") ||
		!strings.Contains(string(out), "pull or build it first") {
		t.Fatalf("want a failed start naming the image: %v\n%s", err, out)
	}
}

// TestImageEngineExitCauses: a rank whose container cannot start or dies
// fails its start with the cause read from the runtime and a hint: no GPU
// runtime (on a host without the NVIDIA Container Toolkit; skipped where
// docker has it), killed for lack of memory (a container limited to 8 MiB);
// the container is removed either way.
func TestImageEngineExitCauses(t *testing.T) {
	tag := testImage(t)
	for _, tc := range []struct {
		name  string
		flags []string // docker run's, before the image
		args  []string // the engine's, after it
		cause string
		hint  string
		noGPU bool // needs a docker without a GPU runtime
	}{
		{"no GPU runtime", []string{"--gpus", `"device=0"`}, nil,
			`the container runtime: could not select device driver`, "NVIDIA Container Toolkit", true},
		{"out of memory", []string{"--memory", "8m", "--memory-swap", "8m"}, []string{"--sim-kv-tokens", "100000000"},
			"its container was killed for lack of memory (OOMKilled)", "ran out of memory", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noGPU && gpuRuntime() {
				t.Skip("docker here has a GPU runtime (the NVIDIA Container Toolkit): --gpus does not fail for want of one")
			}
			port := simproc.FreePort(t)
			p := strconv.Itoa(port)
			name := "warden-test-" + strconv.Itoa(os.Getpid()) + "-" + p
			argv := append([]string{"docker", "run", "--name", name, "--label", engineplan.LabelOwner + "=" + launch.Owner(),
				"-p", "127.0.0.1:" + p + ":" + p}, tc.flags...)
			argv = append(append(argv, tag, "demo", "--host", "0.0.0.0", "--port", p), tc.args...)
			spec := launch.Spec{Rank: 0, Port: port, Argv: argv, LogPath: filepath.Join(t.TempDir(), "rank-0.log"),
				Container: &launch.Container{Runtime: "docker", Name: name}}
			t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
			_, err := launch.Start(context.Background(), []launch.Spec{spec}, launch.Options{StartupTimeout: time.Minute})
			var se *launch.StartupError
			if !errors.As(err, &se) || !strings.Contains(se.Cause, tc.cause) || !strings.Contains(se.Hint, tc.hint) {
				t.Fatalf("want a startup error with cause %q and hint %q, got %v", tc.cause, tc.hint, err)
			}
			if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "name="+name).Output(); len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("the failed rank's container %s was not removed", name)
			}
		})
	}
}

// gpuRuntime reports whether docker here can give a container GPUs: the
// NVIDIA Container Toolkit's runtime is registered with the daemon, or its
// hook or CLI is installed.
func gpuRuntime() bool {
	out, _ := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	if strings.Contains(string(out), "nvidia") {
		return true
	}
	for _, bin := range []string{"nvidia-container-runtime-hook", "nvidia-container-cli", "nvidia-ctk"} {
		if _, err := exec.LookPath(bin); err == nil {
			return true
		}
	}
	return false
}

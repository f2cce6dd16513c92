package engineplan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lmwarden/warden/hostcpu"
)

// Engines from a container image (--image, docs/container.md): one
// container per rank runs the image's entry point, which for vLLM's own
// images (vllm/vllm-openai) is `vllm serve`, with the arguments the warden
// gives a host vLLM after `serve` (Engine.ServeArgs) but --host 0.0.0.0:
// the container has its own network, and its port is published on the
// host's 127.0.0.1 only. The docker (or podman) CLI runs in the foreground,
// so the rank's process is the CLI, its output the container's, and
// package launch supervises it as any engine (Spec.Container adds what a
// container needs beyond a process).

// Container labels: every container of a warden carries them, so that the
// next warden finds what a killed one left (launch.RemoveLeftovers).
const (
	LabelRun   = "io.lmwarden.run"   // the warden run's id
	LabelRank  = "io.lmwarden.rank"  // the rank
	LabelOwner = "io.lmwarden.owner" // the warden process: host/pid/start (launch.Owner)
	// LabelVLLMVersion, on an image, names the vLLM version it serves: the
	// first place ImageVersion looks.
	LabelVLLMVersion = "io.lmwarden.vllm-version"
)

// ContainerHFHome is where a container's Hugging Face cache is mounted
// (vLLM's images run as root, and HF_HOME is set to it).
const ContainerHFHome = "/root/.cache/huggingface"

// passedEnv are the variables a container gets by name (their values stay
// out of the command line and the logs) when the warden's environment has
// them: the Hugging Face token and offline switches.
var passedEnv = []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"}

// Runtimes are the container runtimes --container-runtime takes, in the
// order auto-detection tries them.
var Runtimes = []string{"docker", "podman"}

// FindRuntime resolves --container-runtime: docker or podman (a name on
// PATH or a path), or "" to take the first of Runtimes on PATH.
func FindRuntime(name string) (string, error) {
	if name != "" {
		exe, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("--container-runtime %s: not found (%v): install it, or name docker or podman on PATH", name, err)
		}
		return exe, nil
	}
	for _, r := range Runtimes {
		if exe, err := exec.LookPath(r); err == nil {
			return exe, nil
		}
	}
	return "", errors.New("--image needs docker or podman, and neither is on PATH: install one (Debian: apt-get install docker.io), " +
		"or run a host vLLM without --image")
}

// IsPodman says whether the runtime executable is Podman (CDI device names
// for GPUs) rather than Docker.
func IsPodman(runtime string) bool {
	return strings.Contains(filepath.Base(runtime), "podman")
}

// runtimeCmd runs the runtime CLI with a deadline, returning its trimmed
// output and, on failure, an error carrying its last line.
func runtimeCmd(ctx context.Context, timeout time.Duration, runtime string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, runtime, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		msg := lastLine(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("%s %s: %s", filepath.Base(runtime), args[0], msg)
	}
	return strings.TrimSpace(out.String()), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// CheckImage makes sure image is on this host before any engine starts:
// present, or pulled now (minutes for vLLM's images, with the runtime's
// progress on stderr). The error says what to do.
func CheckImage(ctx context.Context, runtime, image string, log *slog.Logger) error {
	if _, err := runtimeCmd(ctx, time.Minute, runtime, "image", "inspect", "--format", "{{.Id}}", image); err == nil {
		return nil
	} else if strings.Contains(err.Error(), "Cannot connect to the Docker daemon") || strings.Contains(err.Error(), "Is the docker daemon running") {
		return fmt.Errorf("%v: start the container daemon (systemctl start docker, or dockerd &) and run again", err)
	}
	log.Info("pulling the engine image (not on this host yet)", "image", image)
	cmd := exec.CommandContext(ctx, runtime, "pull", image)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = os.Stderr, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("image %s is not on this host and could not be pulled (%s): pull or build it first "+
			"(%s pull %s), and check the name and tag", image, lastLine(errb.String()+"\n"+err.Error()), filepath.Base(runtime), image)
	}
	return nil
}

var reTagVersion = regexp.MustCompile(`:v?(\d+\.\d+(?:\.\d+)?[\w.+-]*)$`)

// ImageVersion reads the vLLM version image serves, so that the
// per-version rules (context auto, host tier, tool parsers) apply as for a
// host install: the image's LabelVLLMVersion label; else vllm's package
// metadata inside it (python3 reading importlib.metadata, which imports
// neither vLLM nor torch: about a second); else a tag shaped like a
// version (vllm/vllm-openai:v0.32.0). "" with from "" when none says.
func ImageVersion(ctx context.Context, runtime, image string) (version, from string) {
	if v, err := runtimeCmd(ctx, time.Minute, runtime, "image", "inspect", "--format",
		`{{ index .Config.Labels "`+LabelVLLMVersion+`" }}`, image); err == nil && v != "" && v != "<no value>" {
		return v, "the image's label " + LabelVLLMVersion
	}
	if v, err := runtimeCmd(ctx, 2*time.Minute, runtime, "run", "--rm", "--network", "none", "--label", LabelRun+"=version-probe",
		"--entrypoint", "python3", image, "-c", `import importlib.metadata as m; print(m.version("vllm"))`); err == nil && v != "" {
		if _, ok := parseVersion(lastLine(v)); ok {
			return lastLine(v), "vllm's package metadata in the image"
		}
	}
	if m := reTagVersion.FindStringSubmatch(image); m != nil {
		return m[1], "the image's tag"
	}
	return "", ""
}

// Container is how every rank's engine runs from an image.
type Container struct {
	Runtime string // the docker or podman executable
	Image   string
	RunID   string // this warden run's id: in every container's name and LabelRun
	Owner   string // LabelOwner's value: this warden process (launch.Owner)
	// HFCache is the host's Hugging Face cache folder, mounted at
	// ContainerHFHome; "" none.
	HFCache string
	// ModelDir is --model when it is a local folder, mounted read-only at
	// the same path; "" none.
	ModelDir string
	// Getenv reads the warden's environment, for the variables passed by
	// name (HF_TOKEN...); os.Getenv when nil.
	Getenv func(string) string
	// CIDDir, when set, is where each rank's runtime writes its
	// container's id (--cidfile), for the watchdog that removes the
	// container when its CLI dies (launch.Container.CIDFile).
	CIDDir string
}

// CIDFile is rank's --cidfile, "" without CIDDir.
func (c Container) CIDFile(rank int) string {
	if c.CIDDir == "" {
		return ""
	}
	return filepath.Join(c.CIDDir, c.Name(rank)+".cid")
}

// Name is rank's container name: warden-<run>-rank<rank>.
func (c Container) Name(rank int) string {
	return "warden-" + c.RunID + "-rank" + strconv.Itoa(rank)
}

// RankDevices is what one rank's container is given of the host.
type RankDevices struct {
	GPUs []string // the rank's GPUs (NVML indices or UUIDs); none: no GPU
	CPUs []int    // --device cpu: the rank's cores (--cpuset-cpus); none: all
	Env  []string // NAME=value the engine gets (the CPU binding variables)
}

// Argv is the runtime's command line that serves rank on the host's
// 127.0.0.1:port with args (Engine.ServeArgs with Host 0.0.0.0):
//
//	docker run --name N --label run/rank/owner --ipc=host -p 127.0.0.1:P:P
//	  [--gpus "device=0,1"] (podman: --device nvidia.com/gpu=0 per GPU, CDI)
//	  [--cpuset-cpus L] [-e NAME=value]... -e HF_HOME=... -v HFCache:HF_HOME
//	  [-e HF_TOKEN]... [-v ModelDir:ModelDir:ro] IMAGE args...
//
// --ipc=host gives vLLM the host's /dev/shm (its tensor-parallel workers
// and the host KV tier map files there, sized from the host's); the
// container is not removed on exit (--rm) so that its exit cause can be
// read (launch inspects, then removes it).
func (c Container) Argv(rank, port int, dev RankDevices, args []string) []string {
	p := strconv.Itoa(port)
	argv := []string{c.Runtime, "run", "--name", c.Name(rank),
		"--label", LabelRun + "=" + c.RunID, "--label", LabelRank + "=" + strconv.Itoa(rank),
		"--label", LabelOwner + "=" + c.Owner,
		"--ipc=host", "-p", "127.0.0.1:" + p + ":" + p}
	if f := c.CIDFile(rank); f != "" {
		argv = append(argv, "--cidfile", f)
	}
	if len(dev.GPUs) > 0 {
		if IsPodman(c.Runtime) {
			for _, g := range dev.GPUs {
				argv = append(argv, "--device", "nvidia.com/gpu="+g)
			}
		} else {
			// The value is read as CSV: the quotes keep "device=0,1" one field.
			argv = append(argv, "--gpus", `"device=`+strings.Join(dev.GPUs, ",")+`"`)
		}
	}
	if len(dev.CPUs) > 0 {
		argv = append(argv, "--cpuset-cpus", hostcpu.FormatList(dev.CPUs))
	}
	for _, kv := range dev.Env {
		argv = append(argv, "-e", kv)
	}
	if c.HFCache != "" {
		argv = append(argv, "-e", "HF_HOME="+ContainerHFHome, "-v", c.HFCache+":"+ContainerHFHome)
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	for _, name := range passedEnv {
		if getenv(name) != "" {
			argv = append(argv, "-e", name)
		}
	}
	if c.ModelDir != "" {
		argv = append(argv, "-v", c.ModelDir+":"+c.ModelDir+":ro")
	}
	argv = append(argv, c.Image)
	return append(argv, args...)
}

// HostHFCache is the host's Hugging Face cache folder as vLLM on the host
// would use it: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface. It is created when missing, so that what a
// container downloads stays for the next run.
func HostHFCache(getenv func(string) string) (string, error) {
	dir := getenv("HF_HOME")
	if dir == "" {
		base := getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("finding the Hugging Face cache: %w (set HF_HOME)", err)
			}
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "huggingface")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("the Hugging Face cache %s: %w (set HF_HOME to a folder the warden can write)", dir, err)
	}
	return filepath.Abs(dir)
}

// LocalModelDir is model's absolute path when it is a local folder, else
// "" (a Hugging Face name, read from the mounted cache).
func LocalModelDir(model string) string {
	if st, err := os.Stat(model); err == nil && st.IsDir() {
		if abs, err := filepath.Abs(model); err == nil {
			return abs
		}
	}
	return ""
}

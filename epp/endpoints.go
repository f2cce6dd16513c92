package epp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.yaml.in/yaml/v3"
)

// MaxEndpointsFile bounds an endpoints file, as llm-d's file discovery does.
const MaxEndpointsFile = 1 << 20

// Endpoint is one entry of an endpoints file in llm-d's file-discovery
// schema, so that llm-d's EPP and the warden's read the same file:
//
//	endpoints:
//	  - name: vllm-0        # unique within its namespace
//	    namespace: default  # optional
//	    address: "10.0.0.1" # a literal IPv4 address
//	    port: "8000"        # 1-65535, as a string
//	    labels: {k: v}      # optional
type Endpoint struct {
	Name      string            `yaml:"name" json:"name"`
	Namespace string            `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Address   string            `yaml:"address" json:"address"`
	Port      string            `yaml:"port" json:"port"`
	Labels    map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
}

// HostPort is the endpoint as the gateway is told it.
func (e Endpoint) HostPort() string { return net.JoinHostPort(e.Address, e.Port) }

// URL is the engine's base URL.
func (e Endpoint) URL() string { return "http://" + e.HostPort() }

// ParseEndpoints reads an endpoints file's content (YAML or JSON) and
// checks every entry as llm-d does: a name, a literal IPv4 address, a port
// in 1-65535; a name twice in a namespace is an error here (llm-d lets the
// last one win, which hides a typo).
func ParseEndpoints(b []byte) ([]Endpoint, error) {
	if len(b) > MaxEndpointsFile {
		return nil, fmt.Errorf("%d bytes, over the %d-byte limit", len(b), MaxEndpointsFile)
	}
	var f struct {
		Endpoints []Endpoint `yaml:"endpoints"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && err != io.EOF {
		return nil, fmt.Errorf("not an endpoints file (want endpoints: [{name, address, port}]): %w", err)
	}
	seen := map[string]bool{}
	for i, e := range f.Endpoints {
		where := fmt.Sprintf("endpoint %d (%q)", i+1, e.Name)
		if e.Name == "" {
			return nil, fmt.Errorf("%s: no name", where)
		}
		if a, err := netip.ParseAddr(e.Address); err != nil || !a.Is4() {
			return nil, fmt.Errorf("%s: address %q is not a literal IPv4 address", where, e.Address)
		}
		if p, err := strconv.Atoi(e.Port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%s: port %q is not a number in 1-65535", where, e.Port)
		}
		ns := e.Namespace
		if ns == "" {
			ns = "default"
		}
		if seen[ns+"/"+e.Name] {
			return nil, fmt.Errorf("%s: the name is given twice in namespace %s", where, ns)
		}
		seen[ns+"/"+e.Name] = true
	}
	return f.Endpoints, nil
}

// ReadEndpoints reads and checks an endpoints file.
func ReadEndpoints(path string) ([]Endpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("endpoints file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxEndpointsFile+1))
	if err != nil {
		return nil, fmt.Errorf("endpoints file %s: %w", path, err)
	}
	eps, err := ParseEndpoints(b)
	if err != nil {
		return nil, fmt.Errorf("endpoints file %s: %w", path, err)
	}
	return eps, nil
}

// WatchEndpoints calls changed with the file's endpoints each time it is
// written or replaced (an editor's or a script's rename over it included)
// until ctx ends. A file that does not parse is logged and skipped: the
// endpoints stay as they were.
func WatchEndpoints(ctx context.Context, path string, log *slog.Logger, changed func([]Endpoint)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching the endpoints file: %w", err)
	}
	defer w.Close()
	dir, name := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	if err := w.Add(dir); err != nil { // the directory: a rename over the file replaces its inode
		return fmt.Errorf("watching the endpoints file's directory %s: %w", dir, err)
	}
	// Writes come in bursts (truncate, write, close): read once they settle.
	const settle = 50 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			// The file itself, or Kubernetes' ..data link swapped under a
			// mounted ConfigMap (the file is a link through it).
			if base := filepath.Base(ev.Name); (base == name || base == "..data") &&
				ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
				timer.Reset(settle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("watching the endpoints file", "path", path, "error", err)
		case <-timer.C:
			eps, err := ReadEndpoints(path)
			if err != nil {
				log.Error("endpoints file not reloaded; the endpoints stay as they were", "error", err)
				continue
			}
			changed(eps)
		}
	}
}

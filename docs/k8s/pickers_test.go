package k8s

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/lmwarden/warden/kvevents"
)

// TestSeveralPickers: the picker runs as several replicas that agree
// (issue 43): at least two, a rolling update that starts the new picker
// before the old one goes, a PodDisruptionBudget that keeps one through a
// drain yet lets a drain proceed; every picker subscribes to the KV-cache
// events where vLLM publishes them (the template's ports are the engines'
// --kv-events-config ports, on sockets the engine binds and the pod
// exposes), and a NetworkPolicy lets only the pickers reach those sockets
// while the API port stays open.
func TestSeveralPickers(t *testing.T) {
	objs := loadManifests(t)
	picker := find(t, objs, "Deployment", "warden-epp")
	replicas, _ := dig(picker.doc, "spec", "replicas").(int)
	if replicas < 2 {
		t.Errorf("the picker runs %d replica(s); want at least two", replicas)
	}
	strategy, _ := dig(picker.doc, "spec", "strategy").(map[string]any)
	if strategy["type"] != "RollingUpdate" || fmt.Sprint(dig(strategy, "rollingUpdate", "maxUnavailable")) != "0" {
		t.Errorf("the picker's strategy %v: want RollingUpdate with maxUnavailable 0 (the new picker ready before an old one goes)", strategy)
	}
	labels := dig(picker.doc, "spec", "template", "metadata", "labels")
	pdb := find(t, objs, "PodDisruptionBudget", "")
	if !contains(labels, dig(pdb.doc, "spec", "selector", "matchLabels")) {
		t.Errorf("the PodDisruptionBudget selects %v; the picker's pods are labelled %v", dig(pdb.doc, "spec", "selector"), labels)
	}
	if min, _ := dig(pdb.doc, "spec", "minAvailable").(int); min < 1 || min >= replicas {
		t.Errorf("the PodDisruptionBudget keeps %v of %d pickers: want at least one, and fewer than all (a drain must proceed)",
			dig(pdb.doc, "spec", "minAvailable"), replicas)
	}

	epp := container(t, picker, "epp")
	engines := find(t, objs, "Deployment", "qwen3-coder")
	vllm := container(t, engines, "vllm")
	var kv struct {
		Enable   bool   `json:"enable_kv_cache_events"`
		Endpoint string `json:"endpoint"`
		Replay   string `json:"replay_endpoint"`
	}
	if err := json.Unmarshal([]byte(flag(t, vllm, "--kv-events-config")), &kv); err != nil || !kv.Enable {
		t.Fatalf("vLLM's --kv-events-config does not turn events on: %+v %v", kv, err)
	}
	var exposed []string
	for _, p := range vllm["ports"].([]any) {
		exposed = append(exposed, fmt.Sprint(p.(map[string]any)["containerPort"]))
	}
	var kvPorts []string
	for _, pair := range [][2]string{{"--kv-events-endpoint", kv.Endpoint}, {"--kv-events-replay", kv.Replay}} {
		tmpl, engine := flag(t, epp, pair[0]), pair[1]
		if !strings.Contains(tmpl, "{host}") {
			t.Errorf("warden epp %s %s: want a template with {host}, each engine's pod IP", pair[0], tmpl)
		}
		pu, err1 := url.Parse(strings.ReplaceAll(tmpl, "{host}", "10.0.0.1"))
		eu, err2 := url.Parse(strings.ReplaceAll(engine, "*", "0.0.0.0"))
		if err1 != nil || err2 != nil || pu.Port() == "" || pu.Port() != eu.Port() {
			t.Errorf("warden epp %s %s does not reach vLLM's %s", pair[0], tmpl, engine)
			continue
		}
		if pair[0] == "--kv-events-endpoint" && !kvevents.IsBindEndpoint(engine) {
			t.Errorf("vLLM's endpoint %s connects out (docs/kv-events.md, \"Who binds\"): the pickers could not connect to it", engine)
		}
		if !slices.Contains(exposed, pu.Port()) {
			t.Errorf("the engine's pod does not declare port %s (%s)", pu.Port(), pair[0])
		}
		kvPorts = append(kvPorts, pu.Port())
	}

	policy := find(t, objs, "NetworkPolicy", "")
	if !contains(dig(engines.doc, "spec", "template", "metadata", "labels"), dig(policy.doc, "spec", "podSelector", "matchLabels")) {
		t.Fatalf("the NetworkPolicy does not select the engines' pods")
	}
	api := flag(t, vllm, "--port")
	open, fromPickers := map[string]bool{}, map[string]bool{}
	for _, rule := range dig(policy.doc, "spec", "ingress").([]any) {
		rule := rule.(map[string]any)
		var ports []string
		for _, p := range rule["ports"].([]any) {
			ports = append(ports, fmt.Sprint(p.(map[string]any)["port"]))
		}
		from, _ := rule["from"].([]any)
		for _, p := range ports {
			switch {
			case len(from) == 0:
				open[p] = true
			case len(from) == 1 && contains(labels, dig(from[0], "podSelector", "matchLabels")):
				fromPickers[p] = true
			}
		}
	}
	if !open[api] {
		t.Errorf("the NetworkPolicy closes the engines' API port %s to the gateway", api)
	}
	for _, p := range kvPorts {
		if open[p] || !fromPickers[p] {
			t.Errorf("KV-event port %s: open to all %v, to the pickers %v; want the pickers only", p, open[p], fromPickers[p])
		}
	}
}

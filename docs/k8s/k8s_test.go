// Package k8s holds the Kubernetes manifests of docs/epp.md's Kubernetes
// route; its tests check them, since no cluster runs here.
package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/lmwarden/warden/epp"
)

// object is one manifest: a YAML document of a *.yaml file here.
type object struct {
	file string
	doc  map[string]any
}

func (o object) kind() string       { s, _ := o.doc["kind"].(string); return s }
func (o object) apiVersion() string { s, _ := o.doc["apiVersion"].(string); return s }
func (o object) name() string       { s, _ := dig(o.doc, "metadata", "name").(string); return s }
func (o object) String() string     { return fmt.Sprintf("%s: %s %s", o.file, o.kind(), o.name()) }

// withoutSchema are the kinds checked here by hand (their schemas live in
// the Kubernetes API server, not in a CRD): names and cross-references.
var withoutSchema = []string{"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "PodDisruptionBudget", "NetworkPolicy"}

// TestManifestsMatchTheirSchemas: every manifest of a kind with a CRD in
// testdata/ is valid against that CRD's openAPIV3Schema, unknown fields
// refused as `kubectl apply --validate=strict` refuses them; every other
// manifest is of a kind this test knows to have no schema here.
func TestManifestsMatchTheirSchemas(t *testing.T) {
	schemas := loadSchemas(t)
	objs := loadManifests(t)
	checked := map[string]int{}
	for _, o := range objs {
		if o.name() == "" {
			t.Errorf("%s: no metadata.name", o)
		}
		s, ok := schemas[o.apiVersion()+"/"+o.kind()]
		if !ok {
			if !slices.Contains(withoutSchema, o.kind()) {
				t.Errorf("%s: no schema for %s %s in testdata/ and not a kind this test knows", o, o.apiVersion(), o.kind())
			}
			continue
		}
		if err := s.Validate(jsonValue(t, o.doc)); err != nil {
			t.Errorf("%s does not match its schema:\n%v", o, err)
		}
		checked[o.kind()]++
	}
	for _, kind := range []string{"InferencePool", "HTTPRoute"} {
		if checked[kind] == 0 {
			t.Errorf("no %s manifest was checked against its schema", kind)
		}
	}
}

// TestSchemaRefusesUnknownFields: the check above can fail. A field the
// InferencePool does not have, a misspelt one and a wrong type are refused.
func TestSchemaRefusesUnknownFields(t *testing.T) {
	schemas := loadSchemas(t)
	pool := find(t, loadManifests(t), "InferencePool", "")
	s := schemas[pool.apiVersion()+"/"+pool.kind()]
	ref := func(doc map[string]any) map[string]any { return dig(doc, "spec", "endpointPickerRef").(map[string]any) }
	for name, edit := range map[string]func(doc map[string]any){
		"unknown field in spec":        func(doc map[string]any) { doc["spec"].(map[string]any)["endpointPicker"] = "warden-epp" },
		"misspelt field in the ref":    func(doc map[string]any) { ref(doc)["failuremode"] = "FailOpen" },
		"failure mode not in the enum": func(doc map[string]any) { ref(doc)["failureMode"] = "Open" },
		"port number as a string": func(doc map[string]any) {
			dig(doc, "spec", "targetPorts").([]any)[0].(map[string]any)["number"] = "8000"
		},
		"unknown field in the metadata": func(doc map[string]any) { doc["metadata"].(map[string]any)["label"] = map[string]any{"a": "b"} },
		"no selector":                   func(doc map[string]any) { delete(doc["spec"].(map[string]any), "selector") },
	} {
		doc := jsonValue(t, pool.doc).(map[string]any)
		edit(doc)
		if err := s.Validate(doc); err == nil {
			t.Errorf("%s: the schema accepted it", name)
		}
	}
}

// TestReferencesMeet: the pieces name each other as a gateway needs them
// to: the route's backend is the pool, the pool's endpoint picker is the
// picker's Service on its gRPC port, the pool selects the engines' pods on
// their port, the Service selects the picker's pods, and the picker reads
// the file the sidecar writes. (The CEL rule of the InferencePool schema,
// "port is required when kind is Service", is checked here too: the schema
// test does not evaluate CEL.)
func TestReferencesMeet(t *testing.T) {
	objs := loadManifests(t)
	route, pool := find(t, objs, "HTTPRoute", ""), find(t, objs, "InferencePool", "")
	backend := dig(route.doc, "spec", "rules").([]any)[0].(map[string]any)["backendRefs"].([]any)[0].(map[string]any)
	if backend["kind"] != "InferencePool" || backend["group"] != "inference.networking.k8s.io" || backend["name"] != pool.name() {
		t.Errorf("the HTTPRoute's backend %v is not the InferencePool %q", backend, pool.name())
	}

	ref := dig(pool.doc, "spec", "endpointPickerRef").(map[string]any)
	svc := find(t, objs, "Service", ref["name"].(string))
	port := dig(ref, "port", "number")
	if port == nil {
		t.Fatal("the endpointPickerRef has no port: a Service reference needs one")
	}
	picker := find(t, objs, "Deployment", "warden-epp")
	epp := container(t, picker, "epp")
	grpcPort := flag(t, epp, "--grpc-port")
	var found bool
	for _, p := range dig(svc.doc, "spec", "ports").([]any) {
		p := p.(map[string]any)
		if p["port"] == port {
			found = true
			if fmt.Sprint(p["targetPort"]) != grpcPort || p["appProtocol"] != "kubernetes.io/h2c" {
				t.Errorf("Service %s port %v goes to %v (%v); want warden epp's --grpc-port %s over kubernetes.io/h2c",
					svc.name(), port, p["targetPort"], p["appProtocol"], grpcPort)
			}
		}
	}
	if !found {
		t.Errorf("Service %s has no port %v, the InferencePool's endpointPickerRef port", svc.name(), port)
	}
	if sel, labels := dig(svc.doc, "spec", "selector"), dig(picker.doc, "spec", "template", "metadata", "labels"); !contains(labels, sel) {
		t.Errorf("Service %s selects %v; the picker's pods are labelled %v", svc.name(), sel, labels)
	}
	if flag(t, epp, "--host") != "0.0.0.0" {
		t.Error("warden epp listens on loopback only (--host): neither the gateway nor the probes reach it")
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if p := dig(epp, probe, "grpc", "port"); fmt.Sprint(p) != grpcPort {
			t.Errorf("the picker's %s asks gRPC health on port %v, not --grpc-port %s", probe, p, grpcPort)
		}
	}

	engines := find(t, objs, "Deployment", "qwen3-coder")
	sel := dig(pool.doc, "spec", "selector", "matchLabels")
	if labels := dig(engines.doc, "spec", "template", "metadata", "labels"); !contains(labels, sel) {
		t.Errorf("the InferencePool selects %v; the engines' pods are labelled %v", sel, labels)
	}
	target := fmt.Sprint(dig(pool.doc, "spec", "targetPorts").([]any)[0].(map[string]any)["number"])
	if got := flag(t, container(t, engines, "vllm"), "--port"); got != target {
		t.Errorf("vLLM listens on %s, the InferencePool's targetPorts say %s", got, target)
	}
	sidecar := sidecarOf(t, picker)
	env := map[string]string{}
	for _, e := range sidecar["env"].([]any) {
		e := e.(map[string]any)
		env[e["name"].(string)] = e["value"].(string)
	}
	if env["POOL_PORT"] != target {
		t.Errorf("the endpoints sidecar writes port %q, the InferencePool's targetPorts say %s", env["POOL_PORT"], target)
	}
	if want := selectorString(sel); env["POOL_SELECTOR"] != want {
		t.Errorf("the endpoints sidecar lists pods %q, the InferencePool selects %q", env["POOL_SELECTOR"], want)
	}
	if file := flag(t, epp, "--endpoints-file"); !strings.Contains(sidecar["command"].([]any)[2].(string), "f="+file) {
		t.Errorf("warden epp reads %s, which the sidecar does not write", file)
	}
}

// TestSidecarWritesAnEndpointsFile: the go-template the endpoints sidecar
// gives kubectl, run on a pod list as the API server answers it, is an
// endpoints file warden epp reads: running pods with an IP, each once.
func TestSidecarWritesAnEndpointsFile(t *testing.T) {
	picker := find(t, loadManifests(t), "Deployment", "warden-epp")
	sidecar := sidecarOf(t, picker)
	script := sidecar["command"].([]any)[2].(string)
	m := regexp.MustCompile(`(?s)-o go-template='(.*?)' >`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no -o go-template='...' in the sidecar's script:\n%s", script)
	}
	// The script splices the port in from the environment: '"$POOL_PORT"'.
	text := strings.ReplaceAll(m[1], `'"$POOL_PORT"'`, "8000")
	tmpl, err := template.New("endpoints").Parse(text)
	if err != nil {
		t.Fatalf("kubectl would refuse the go-template: %v", err)
	}
	pods := map[string]any{"items": []any{
		map[string]any{"metadata": map[string]any{"name": "qwen3-coder-7d9f-abcde"}, "status": map[string]any{"podIP": "10.244.1.17"}},
		map[string]any{"metadata": map[string]any{"name": "qwen3-coder-7d9f-fghij"}, "status": map[string]any{"podIP": "10.244.2.9"}},
		map[string]any{"metadata": map[string]any{"name": "qwen3-coder-7d9f-klmno"}, "status": map[string]any{}}, // no IP yet
	}}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, pods); err != nil {
		t.Fatal(err)
	}
	eps, err := epp.ParseEndpoints(out.Bytes())
	if err != nil {
		t.Fatalf("warden epp would refuse the sidecar's file: %v\n%s", err, out.String())
	}
	var got []string
	for _, e := range eps {
		got = append(got, e.Name+"="+e.HostPort())
	}
	want := []string{"qwen3-coder-7d9f-abcde=10.244.1.17:8000", "qwen3-coder-7d9f-fghij=10.244.2.9:8000"}
	if !slices.Equal(got, want) {
		t.Errorf("endpoints from the sidecar's file: got %v, want %v\n%s", got, want, out.String())
	}
	if !strings.Contains(fmt.Sprint(dig(sidecar, "startupProbe", "exec", "command")), "address:") {
		t.Error("the sidecar's startup probe does not wait for an endpoint in the file: warden epp would start on an empty one and exit")
	}
}

// loadSchemas compiles the openAPIV3Schema of every served version of every
// CRD in testdata/, keyed "group/version/Kind".
func loadSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in testdata/ (%v)", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4) // OpenAPI 3.0's schema objects are draft 4/5 JSON Schema
	out := map[string]*jsonschema.Schema{}
	for _, f := range files {
		var crd map[string]any
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		group, kind := dig(crd, "spec", "group").(string), dig(crd, "spec", "names", "kind").(string)
		for _, v := range dig(crd, "spec", "versions").([]any) {
			v := v.(map[string]any)
			if v["served"] != true {
				continue
			}
			schema := jsonValue(t, dig(v, "schema", "openAPIV3Schema")).(map[string]any)
			strict(schema)
			schema["properties"].(map[string]any)["metadata"] = metadataSchema
			key := group + "/" + v["name"].(string) + "/" + kind
			url := "file:///" + key + ".json"
			if err := c.AddResource(url, schema); err != nil {
				t.Fatalf("%s %s: %v", f, key, err)
			}
			s, err := c.Compile(url)
			if err != nil {
				t.Fatalf("%s %s: %v", f, key, err)
			}
			out[key] = s
		}
	}
	return out
}

// strict refuses unknown fields as the API server's strict field
// validation does: an object schema that lists its properties allows no
// others, unless it says it keeps unknown fields.
func strict(s map[string]any) {
	if _, ok := s["properties"]; ok && s["additionalProperties"] == nil && s["x-kubernetes-preserve-unknown-fields"] != true {
		s["additionalProperties"] = false
	}
	for _, key := range []string{"properties", "patternProperties", "definitions"} {
		if m, ok := s[key].(map[string]any); ok {
			for _, sub := range m {
				if sub, ok := sub.(map[string]any); ok {
					strict(sub)
				}
			}
		}
	}
	for _, key := range []string{"items", "additionalProperties", "not"} {
		if sub, ok := s[key].(map[string]any); ok {
			strict(sub)
		}
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := s[key].([]any); ok {
			for _, sub := range l {
				if sub, ok := sub.(map[string]any); ok {
					strict(sub)
				}
			}
		}
	}
}

// metadataSchema is the part of ObjectMeta a manifest sets (a CRD's schema
// says only "type: object"): a name, and nothing the API server would drop.
var metadataSchema = map[string]any{
	"type":                 "object",
	"required":             []any{"name"},
	"additionalProperties": false,
	"properties": map[string]any{
		"name":        map[string]any{"type": "string", "minLength": 1, "maxLength": 253},
		"namespace":   map[string]any{"type": "string"},
		"labels":      map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
		"annotations": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
	},
}

// loadManifests reads every document of every *.yaml file here.
func loadManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests (*.yaml) in docs/k8s (%v)", err)
	}
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc == nil {
				continue
			}
			if doc["apiVersion"] == nil || doc["kind"] == nil {
				t.Fatalf("%s: a document without apiVersion and kind", f)
			}
			out = append(out, object{file: f, doc: doc})
		}
	}
	return out
}

// jsonValue is v as encoding/json decodes it (numbers as json.Number), the
// form the validator takes.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dig follows keys through nested maps; nil where one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// find is the one manifest of kind (named name, unless "").
func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	var hits []object
	for _, o := range objs {
		if o.kind() == kind && (name == "" || o.name() == name) {
			hits = append(hits, o)
		}
	}
	if len(hits) != 1 {
		t.Fatalf("want one %s %q among the manifests, found %d", kind, name, len(hits))
	}
	return hits[0]
}

// container is the pod template's container called name.
func container(t *testing.T, d object, name string) map[string]any {
	t.Helper()
	for _, c := range dig(d.doc, "spec", "template", "spec", "containers").([]any) {
		if c := c.(map[string]any); c["name"] == name {
			return c
		}
	}
	t.Fatalf("%s has no container %q", d, name)
	return nil
}

// sidecarOf is the picker's endpoints sidecar: a native sidecar (an init
// container that keeps running) with a shell script.
func sidecarOf(t *testing.T, d object) map[string]any {
	t.Helper()
	for _, c := range dig(d.doc, "spec", "template", "spec", "initContainers").([]any) {
		if c := c.(map[string]any); c["name"] == "endpoints" {
			if c["restartPolicy"] != "Always" {
				t.Error("the endpoints sidecar is an init container that ends: the file would stop following the pods")
			}
			return c
		}
	}
	t.Fatalf("%s has no endpoints sidecar", d)
	return nil
}

// flag is the value after name in a container's args.
func flag(t *testing.T, c map[string]any, name string) string {
	t.Helper()
	args, _ := c["args"].([]any)
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return fmt.Sprint(args[i+1])
		}
	}
	t.Fatalf("container %v has no %s in its args", c["name"], name)
	return ""
}

// contains reports whether labels has every key and value of sel.
func contains(labels, sel any) bool {
	l, _ := labels.(map[string]any)
	s, _ := sel.(map[string]any)
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

// selectorString is matchLabels as kubectl's -l takes it.
func selectorString(sel any) string {
	var parts []string
	for k, v := range sel.(map[string]any) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

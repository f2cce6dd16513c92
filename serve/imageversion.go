package serve

import (
	"fmt"
	"strings"

	"github.com/lmwarden/warden/engineplan"
)

// versionDisagrees is the warning for an --image whose vLLM version, as the
// warden read it before the start (a label, the package metadata, a tag),
// is not what its running engine reports on /version: the per-version rules
// (context, host KV tier, tool parsers) were then chosen for the wrong
// release. "" without an image, when either is unknown, or when they agree
// (a leading v and a +local suffix aside).
func versionDisagrees(image string, facts engineplan.Facts, running string) string {
	if image == "" || facts.Version == "" || running == "" || sameVersion(facts.Version, running) {
		return ""
	}
	return fmt.Sprintf("--image %s: %s says vLLM %s, but its engine reports %s; the per-version rules "+
		"(context, host KV tier, tool parsers) were chosen for %s: correct the image's %s label or tag",
		image, facts.VersionFrom, facts.Version, running, facts.Version, engineplan.LabelVLLMVersion)
}

func sameVersion(a, b string) bool {
	norm := func(v string) string {
		v, _, _ = strings.Cut(strings.TrimPrefix(strings.TrimSpace(v), "v"), "+")
		return v
	}
	return norm(a) == norm(b)
}

package serve

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/lmwarden/warden/engineplan"
)

// logEngineVersion logs the running engine's vLLM version (GET /version at
// url) once the engines are ready, and warns when an --image's version
// read before the start disagrees with it.
func logEngineVersion(ctx context.Context, image string, facts engineplan.Facts, url string, log *slog.Logger) {
	running := engineplan.Version(ctx, url)
	log.Info("engines ready", "vllm_version", running)
	if msg := versionDisagrees(image, facts, running); msg != "" {
		log.Warn(msg)
	}
}

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

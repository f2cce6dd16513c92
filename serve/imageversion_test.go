package serve

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/engineplan"
)

// An image label that disagrees with the running engine's version is said
// (issue 45); agreement, a host vLLM and unknown versions are not.
func TestVersionDisagrees(t *testing.T) {
	label := engineplan.Facts{Version: "0.31.0", VersionFrom: "the image's label " + engineplan.LabelVLLMVersion}
	msg := versionDisagrees("my/vllm:latest", label, "0.32.0")
	for _, want := range []string{"--image my/vllm:latest", "says vLLM 0.31.0", "its engine reports 0.32.0", engineplan.LabelVLLMVersion} {
		if !strings.Contains(msg, want) {
			t.Errorf("warning %q lacks %q", msg, want)
		}
	}
	for _, c := range []struct {
		image, have, running string
	}{
		{"my/vllm:latest", "v0.32.0", "0.32.0+cu128"}, {"", "0.31.0", "0.32.0"}, {"x", "", "0.32.0"}, {"x", "0.31.0", ""},
	} {
		if msg := versionDisagrees(c.image, engineplan.Facts{Version: c.have}, c.running); msg != "" {
			t.Errorf("%+v: %q, want nothing", c, msg)
		}
	}
}

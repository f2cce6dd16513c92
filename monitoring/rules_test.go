package monitoring

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAlertRules runs Debian's promtool over the alert rules: check rules
// (syntax, PromQL, templates) and test rules (testdata/alerts_test.yml:
// each alert fires on its failure and stays quiet on a healthy box).
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "testdata/alerts_test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

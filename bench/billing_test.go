package bench

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestBillingLineIsTheFirstSystemBlockPerConversation(t *testing.T) {
	a := newConversation(APIAnthropic, "m", "shared system prompt", "sess-a", "dev", billingLine("sess-a"), 16)
	b := newConversation(APIAnthropic, "m", "shared system prompt", "sess-b", "dev", billingLine("sess-b"), 16)
	plain := newConversation(APIAnthropic, "m", "shared system prompt", "sess-c", "dev", "", 16)
	a.add("user", "first")
	first := gjson.GetBytes(a.body(), "system").Raw
	a.add("assistant", "reply")
	a.add("user", "second")
	b.add("user", "first")
	plain.add("user", "first")

	sysA := gjson.GetBytes(a.body(), "system")
	if sysA.Raw != first {
		t.Errorf("system changed between turns:\n%s\n%s", first, sysA.Raw)
	}
	if n := len(sysA.Array()); n != 2 || !strings.HasPrefix(sysA.Get("0.text").Str, "x-anthropic-billing-header: cc_version=2.1.332.") ||
		sysA.Get("1.text").Str != "shared system prompt" {
		t.Errorf("want [billing line, system prompt], got %s", sysA.Raw)
	}
	if gjson.GetBytes(b.body(), "system.0.text").Str == sysA.Get("0.text").Str {
		t.Errorf("two conversations share a billing line: %s", sysA.Get("0.text").Str)
	}
	if got := gjson.GetBytes(plain.body(), "system").Raw; got != `[{"type":"text","text":"shared system prompt"}]` {
		t.Errorf("without --billing-header: %s", got)
	}
}

package identity

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wire builds a header map the way net/http's server does: every name
// canonicalised, underscores included ("session_id" arrives as
// "Session_id").
func wire(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

const (
	ccID       = "ca92e60e-3cb8-4c5e-8d21-fdf99ef4af9c"
	codexID    = "01a22c42-d75f-7393-bcf2-3f3ab22dcead"
	opencodeID = "ses_dd3bbf74effebOePEuD0krbzKm"
	billing    = `{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli;"}`
)

func TestExtract(t *testing.T) {
	ccMeta := `{"model":"m","metadata":{"user_id":"{\"device_id\":\"11b3fc84\",\"account_uuid\":\"\",\"session_id\":\"` + ccID + `\"}"},"messages":[{"role":"user","content":"hi"}]}`
	ccLegacy := `{"model":"m","metadata":{"user_id":"user_11b3fc84f988896cf18331a55877f8cd771bdee8781f603da60ce60495938abd_account__session_` + ccID + `"},"messages":[{"role":"user","content":"hi"}]}`
	chat := `{"model":"m","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"fix the bug"}]}`
	long := strings.Repeat("k", 300)
	tests := []struct {
		name   string
		header http.Header
		body   string
		extra  []string
		want   SessionKey
	}{
		{"Claude Code >= 2.1.86 sends X-Claude-Code-Session-Id",
			wire("X-Claude-Code-Session-Id", ccID), ccMeta, nil, SessionKey{Key: ccID, Source: SourceClaudeHeader}},
		{"Claude Code 2.1.78-2.1.85: metadata.user_id is a JSON string with session_id",
			wire(), ccMeta, nil, SessionKey{Key: ccID, Source: SourceClaudeMetadata}},
		{"Claude Code <= 2.1.77: legacy user_..._session_<uuid>",
			wire(), ccLegacy, nil, SessionKey{Key: ccID, Source: SourceClaudeMetadata}},
		{"Claude Code count_tokens carries only the header",
			wire("X-Claude-Code-Session-Id", ccID), `{"model":"m","messages":[],"tools":[]}`, nil, SessionKey{Key: ccID, Source: SourceClaudeHeader}},
		{"Codex >= 0.131 sends session-id (hyphen)",
			wire("session-id", codexID), `{"prompt_cache_key":"other"}`, nil, SessionKey{Key: codexID, Source: SourceCodexHeader}},
		{"Codex <= 0.130 sends session_id (underscore; arrives as Session_id)",
			wire("session_id", codexID), `{}`, nil, SessionKey{Key: codexID, Source: SourceCodexHeader}},
		{"opencode sends x-session-affinity",
			wire("x-session-affinity", opencodeID, "X-Session-Id", opencodeID), `{}`, nil, SessionKey{Key: opencodeID, Source: SourceOpencode}},
		{"generic X-Session-Id alone",
			wire("X-Session-Id", "conv-7"), `{}`, nil, SessionKey{Key: "conv-7", Source: SourceOpencode}},
		{"an underscore header set by hand as written",
			http.Header{"session_id": {codexID}}, `{}`, nil, SessionKey{Key: codexID, Source: SourceCodexHeader}},
		{"an underscore header set by hand in capitals",
			http.Header{"SESSION_ID": {codexID}}, `{}`, nil, SessionKey{Key: codexID, Source: SourceCodexHeader}},
		{"a header set by hand in another case",
			http.Header{"X-CLAUDE-CODE-SESSION-ID": {ccID}}, `{}`, nil, SessionKey{Key: ccID, Source: SourceClaudeHeader}},
		{"a --session-header name",
			wire("X-My-Conv", "abc"), `{}`, []string{"x-my-conv"}, SessionKey{Key: "abc", Source: SourceCustomHeader}},
		{"a --session-header name with an underscore",
			wire("my_conv", "abc"), `{}`, []string{"my_conv"}, SessionKey{Key: "abc", Source: SourceCustomHeader}},
		{"Codex body only: prompt_cache_key",
			wire(), `{"model":"m","input":"x","prompt_cache_key":"` + codexID + `"}`, nil, SessionKey{Key: codexID, Source: SourcePromptCacheKey}},
		{"opencode setCacheKey quirk: promptCacheKey (camelCase)",
			wire(), `{"promptCacheKey":"` + opencodeID + `","messages":[{"role":"user","content":"a"}]}`, nil, SessionKey{Key: opencodeID, Source: SourcePromptCacheKey}},
		{"Codex 0.171 Responses: client_metadata.session_id",
			wire(), `{"client_metadata":{"thread_id":"t","session_id":"` + codexID + `"},"input":"x"}`, nil, SessionKey{Key: codexID, Source: SourceClientMetadata}},
		{"no id: fingerprint of model + system + first user message",
			wire(), chat, nil, SessionKey{Key: fingerprint((chat)), Source: SourceFingerprint}},
		{"fingerprint comes before user (a person, not a conversation)",
			wire(), `{"user":"alice","messages":[{"role":"user","content":"a"}]}`, nil,
			SessionKey{Key: fingerprint(`{"messages":[{"role":"user","content":"a"}]}`), Source: SourceFingerprint}},
		{"user when there is no user message to fingerprint",
			wire(), `{"user":"alice","messages":[{"role":"system","content":"s"}]}`, nil, SessionKey{Key: "user:alice", Source: SourceUser}},
		{"safety_identifier as the last resort",
			wire(), `{"safety_identifier":"u-1","prompt":"x"}`, nil, SessionKey{Key: "user:u-1", Source: SourceUser}},
		{"system prompt alone is never a key",
			wire(), `{"system":"shared","messages":[]}`, nil, SessionKey{Key: "", Source: SourceNone}},
		{"malformed JSON falls back to what can be read: the fingerprint",
			wire(), `{"messages":[{"role":"user","content":"a"`, nil,
			SessionKey{Key: fingerprint(`{"messages":[{"role":"user","content":"a"}]}`), Source: SourceFingerprint}},
		{"malformed JSON with nothing readable: no key",
			wire(), `{"messages":[{"role":`, nil, SessionKey{Key: "", Source: SourceNone}},
		{"not JSON at all",
			wire(), `hello`, nil, SessionKey{Key: "", Source: SourceNone}},
		{"empty body",
			wire(), ``, nil, SessionKey{Key: "", Source: SourceNone}},
		{"a Claude Code subagent: the parent's session id plus x-claude-code-agent-id",
			wire("X-Claude-Code-Session-Id", ccID, "x-claude-code-agent-id", "a31370cd13e9c38d2"), ccMeta, nil,
			SessionKey{Key: ccID, Source: SourceClaudeHeader, Agent: "a31370cd13e9c38d2", Subagent: true}},
		{"a Claude Code subagent of a client without the session header",
			wire("x-claude-code-agent-id", "a31370cd13e9c38d2"), ccMeta, nil,
			SessionKey{Key: ccID, Source: SourceClaudeMetadata, Agent: "a31370cd13e9c38d2", Subagent: true}},
		{"the Codex root agent sends thread-id equal to session-id",
			wire("session-id", codexID, "thread-id", codexID), `{}`, nil, SessionKey{Key: codexID, Source: SourceCodexHeader}},
		{"a Codex child: the root's session-id, its own thread-id",
			wire("session-id", codexID, "thread-id", "01a22c42-aaaa", "x-codex-parent-thread-id", codexID), `{}`, nil,
			SessionKey{Key: codexID, Source: SourceCodexHeader, Agent: "01a22c42-aaaa", Subagent: true}},
		{"Codex <= 0.130 child (underscores)",
			wire("session_id", codexID, "thread_id", "01a22c42-bbbb"), `{}`, nil,
			SessionKey{Key: codexID, Source: SourceCodexHeader, Agent: "01a22c42-bbbb", Subagent: true}},
		{"an opencode child session has its own id and names its parent",
			wire("x-session-affinity", "ses_child", "x-parent-session-id", opencodeID), `{}`, nil,
			SessionKey{Key: "ses_child", Source: SourceOpencode, Subagent: true, Parent: opencodeID}},
		{"a key over 256 bytes is hashed",
			wire("session-id", long), `{}`, nil, SessionKey{Key: capKey(long, SourceCodexHeader).Key, Source: SourceCodexHeader}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Extract(tt.header, []byte(tt.body), tt.extra)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Extract (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapKeyHashesLongKeys(t *testing.T) {
	k := capKey(strings.Repeat("x", 1000), "s").Key
	if len(k) > MaxKeyLen || !strings.HasPrefix(k, "h:") {
		t.Fatalf("capKey gave %q", k)
	}
	if k == capKey(strings.Repeat("x", 999), "s").Key {
		t.Fatal("different long keys hashed to the same key")
	}
}

func TestFingerprint(t *testing.T) {
	anth := func(sys, first string) string {
		return `{"model":"m","system":[` + sys + `{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"user","content":"` + first + `"},{"role":"assistant","content":"ok"}]}`
	}
	fp := func(s string) string { return fingerprint((s)) }
	if fp(anth(billing+",", "task one")) != fp(anth("", "task one")) {
		t.Error("the billing block changed the fingerprint")
	}
	otherBilling := strings.Replace(billing, "0b8", "1c9", 1)
	if fp(anth(billing+",", "task one")) != fp(anth(otherBilling+",", "task one")) {
		t.Error("a different billing suffix changed the fingerprint")
	}
	if fp(anth("", "task one")) == fp(anth("", "task two")) {
		t.Error("two conversations with the same system prompt share a fingerprint")
	}
	later := `{"model":"m","system":[{"type":"text","text":"You are Claude Code."}],"messages":[{"role":"user","content":"task one"},{"role":"assistant","content":"ok"},{"role":"user","content":"more"}]}`
	if fp(anth("", "task one")) != fp(later) {
		t.Error("a later turn of the same conversation got another fingerprint")
	}
	other := strings.Replace(anth("", "task one"), `"model":"m"`, `"model":"n"`, 1)
	if fp(other) == fp(anth("", "task one")) {
		t.Error("the model is not part of the fingerprint")
	}
	resp := `{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]}]}`
	if fp(resp) == "" {
		t.Error("no fingerprint for a Responses body")
	}
}

func TestParsePin(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		rank    int
		ok      bool
		wantErr bool
	}{
		{"absent", "", 0, false, false},
		{"rank 2", "2", 2, true, false},
		{"spaces are trimmed", " 1 ", 1, true, false},
		{"not a number", "two", 0, true, true},
		{"negative", "-1", 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.value != "" {
				h.Set(PinHeader, tt.value)
			}
			rank, ok, err := ParsePin(h)
			if rank != tt.rank || ok != tt.ok || (err != nil) != tt.wantErr {
				t.Errorf("ParsePin(%q) = %d, %v, %v", tt.value, rank, ok, err)
			}
		})
	}
}

func TestConversation(t *testing.T) {
	sub := SessionKey{Key: ccID, Source: SourceClaudeHeader, Agent: "a1", Subagent: true}
	if got := sub.Conversation(false); got != ccID+AgentSeparator+"a1" {
		t.Errorf("own: %q", got)
	}
	if got := sub.Conversation(true); got != ccID {
		t.Errorf("inherit: %q, want the parent's key", got)
	}
	parent := SessionKey{Key: ccID, Source: SourceClaudeHeader}
	if got := parent.Conversation(false); got != ccID {
		t.Errorf("parent: %q", got)
	}
}

// One tree per root conversation, across the three harnesses' captures
// (docs/clients.md): a subagent's root is its parent's session.
func TestRootIsTheTreesRootConversation(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
		want string
	}{
		{"Claude Code's main conversation", wire("X-Claude-Code-Session-Id", ccID), ccID},
		{"a Claude Code subagent", wire("X-Claude-Code-Session-Id", ccID, "x-claude-code-agent-id", "a31370cd13e9c38d2"), ccID},
		{"the Codex root agent", wire("session-id", codexID, "thread-id", codexID), codexID},
		{"a Codex child thread", wire("session-id", codexID, "thread-id", "01a22c42-aaaa", "x-codex-parent-thread-id", codexID), codexID},
		{"an opencode session", wire("x-session-affinity", opencodeID), opencodeID},
		{"an opencode child session", wire("x-session-affinity", "ses_child", "x-parent-session-id", opencodeID), opencodeID},
		{"nothing identified", http.Header{}, ""},
	} {
		k := Extract(tc.h, []byte(`{}`), nil)
		for _, inherit := range []bool{false, true} {
			k.Key = k.Conversation(inherit) // as the core keys it (--subagents own, parent)
			if got := k.Root(); got != tc.want {
				t.Errorf("%s (inherit %v): Root() = %q, want %q", tc.name, inherit, got, tc.want)
			}
		}
	}
}

package compat

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/router/identity"
)

const (
	billing = `{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=cli;"}`
)

func TestStripBilling(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"billing block first of two",
			`{"system":[` + billing + `, {"type":"text","text":"S"}],"x":1}`,
			`{"system":[{"type":"text","text":"S"}],"x":1}`},
		{"billing block alone",
			`{"system":[` + billing + `],"x":1}`,
			`{"system":[],"x":1}`},
		{"no billing block", `{"system":[{"type":"text","text":"S"}]}`, `{"system":[{"type":"text","text":"S"}]}`},
		{"system as a string", `{"system":"x-anthropic-billing-header: a"}`, `{"system":"x-anthropic-billing-header: a"}`},
		{"billing block not first is kept",
			`{"system":[{"type":"text","text":"S"},` + billing + `]}`,
			`{"system":[{"type":"text","text":"S"},` + billing + `]}`},
		{"malformed", `{"system":[` + billing, `{"system":[` + billing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.in)
			got := string(StripBilling(b, identity.Scan(b).System))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("stripBilling (-want +got):\n%s", diff)
			}
		})
	}
}

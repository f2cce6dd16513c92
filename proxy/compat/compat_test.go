package compat

import (
	"io"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

func TestRewriteModelTouchesOnlyTheTopLevelModel(t *testing.T) {
	for _, served := range []string{"s", "a-much-longer/served-name"} {
		c := New(served, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
		for _, in := range []string{
			`{"model":"claude-opus-5-5","messages":[]}`,
			`{ "tools":[{"model":"inner"}], "model" : "x\"y", "stream":true }`,
			`{"messages":[{"role":"user","content":"\"model\":\"z\""}],"model":"gpt"}`,
		} {
			out := string(c.RewriteModel([]byte(in)))
			want := gjson.Parse(in).Value().(map[string]any)
			want["model"] = served
			if diff := cmp.Diff(want, gjson.Parse(out).Value()); diff != "" || !gjson.Valid(out) {
				t.Errorf("served %q, %s -> %s (-want +got):\n%s", served, in, out, diff)
			}
		}
	}
}

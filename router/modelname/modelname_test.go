package modelname

import (
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tidwall/gjson"
)

func TestRewriteTouchesOnlyTheTopLevelModel(t *testing.T) {
	for _, served := range []string{"s", "a-much-longer/served-name"} {
		m := New(served, false, slog.New(slog.DiscardHandler))
		for _, in := range []string{
			`{"model":"claude-opus-5-5","messages":[]}`,
			`{ "tools":[{"model":"inner"}], "model" : "x\"y", "stream":true }`,
			`{"messages":[{"role":"user","content":"\"model\":\"z\""}],"model":"gpt"}`,
		} {
			out := string(m.Rewrite([]byte(in)))
			want := gjson.Parse(in).Value().(map[string]any)
			want["model"] = served
			if diff := cmp.Diff(want, gjson.Parse(out).Value()); diff != "" || !gjson.Valid(out) {
				t.Errorf("served %q, %s -> %s (-want +got):\n%s", served, in, out, diff)
			}
		}
	}
}

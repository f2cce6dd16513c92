package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/lmwarden/warden/router"
)

// vllmModels is vLLM 0.32.0's GET /v1/models (CPU build, the tiny test
// model served as "tiny"), trimmed of its permission list.
const vllmModels = `{"object":"list","data":[{"id":"tiny","object":"model","created":1796128289,"owned_by":"vllm",` +
	`"root":"/work/.vllm-cpu/tiny","parent":null,"max_model_len":4096,"permission":[]}]}`

func TestModelsServeWhatTheEngineSays(t *testing.T) {
	engine := func(body string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/models" {
				io.WriteString(w, body)
			}
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	for _, tc := range []struct{ name, served, engine, wantID string }{
		{"the engine's entry, max_model_len and root kept", "tiny", vllmModels, "tiny"},
		{"the id becomes the served name", "qwen", vllmModels, "qwen"},
		{"an adapter beside the base model stays", "qwen",
			`{"object":"list","data":[{"id":"base","parent":null,"max_model_len":4096},{"id":"lora1","parent":"base"}]}`, "qwen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, front := testProxyBackends(t, testConfig{Config: router.Config{ServedModel: tc.served}}, []router.Backend{{Rank: 0, URL: engine(tc.engine).URL, MaxNumSeqs: 8}})
			resp, err := http.Get(front.URL + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := gjson.GetBytes(b, "data.0")
			if m.Get("id").Str != tc.wantID || m.Get("max_model_len").Int() != 4096 || !m.Get("parent").Exists() {
				t.Errorf("/v1/models: %s", b)
			}
			if n := len(gjson.GetBytes(b, "data").Array()); n != len(gjson.Get(tc.engine, "data").Array()) {
				t.Errorf("%d entries, want the engine's %d: %s", n, len(gjson.Get(tc.engine, "data").Array()), b)
			}
		})
	}
	// No engine answers: the served name alone.
	_, front := testProxyBackends(t, testConfig{Config: router.Config{ServedModel: "qwen"}}, []router.Backend{{Rank: 0, URL: engine(`nope`).URL, MaxNumSeqs: 8}})
	resp, err := http.Get(front.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := gjson.GetBytes(b, "data.#.id").Raw; got != `["qwen"]` {
		t.Errorf("without an engine answer: %s", b)
	}
}

// TestModelsReportTheSmallestContext: ranks that fit different contexts
// (cards of different sizes, --max-model-len auto) are reported at the
// smallest, in /v1/models and the status, and a restart learns it again.
func TestModelsReportTheSmallestContext(t *testing.T) {
	var lens [2]atomic.Int64
	engine := func(i int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/metrics":
				io.WriteString(w, metricsText(0, 0, 0, 0, 0))
			case "/v1/models":
				fmt.Fprintf(w, `{"object":"list","data":[{"id":"tiny","parent":null,"max_model_len":%d}]}`, lens[i].Load())
			}
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	lens[0].Store(40960)
	lens[1].Store(38000)
	p, front := testProxyBackends(t, testConfig{Config: router.Config{ServedModel: "qwen"}}, []router.Backend{
		{Rank: 0, URL: engine(0).URL, MaxNumSeqs: 8}, {Rank: 1, URL: engine(1).URL, MaxNumSeqs: 8}})
	coreOf(p).CheckNow(context.Background())
	models := func() int64 {
		resp, err := http.Get(front.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return gjson.GetBytes(b, "data.0.max_model_len").Int()
	}
	st := coreOf(p).Status()
	if got := models(); got != 38000 || st.MaxModelLen != 38000 || st.Replicas[0].MaxModelLen != 40960 {
		t.Errorf("/v1/models max_model_len %d, status %d (replica 0 %d), want the smallest 38000 (and 40960)", got, st.MaxModelLen, st.Replicas[0].MaxModelLen)
	}
	lens[1].Store(50000) // rank 1 restarts with a larger context
	coreOf(p).NoteRestart(1)
	coreOf(p).CheckNow(context.Background())
	if got := models(); got != 40960 || coreOf(p).Status().MaxModelLen != 40960 {
		t.Errorf("after rank 1's restart: /v1/models %d, status %d, want 40960", got, coreOf(p).Status().MaxModelLen)
	}
}

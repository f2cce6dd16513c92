package enginelog

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lmwarden/warden/enginelog/enginelogtest"
)

func TestTailKeepsTheLastLines(t *testing.T) {
	var file strings.Builder
	tw := NewTail(&file)
	if tw.Wrote() || tw.Last() != "" {
		t.Fatal("a new tail is not empty")
	}
	for i := range 50 {
		tw.Write([]byte("line " + strconv.Itoa(i) + "\n"))
	}
	tw.Write([]byte("Loading shards: 10%\rLoading shards: 90%\rpart"))
	tw.Write([]byte("ial"))
	got := tw.Lines()
	if len(got) != tailLines+1 {
		t.Fatalf("kept %d lines, want %d + the unfinished one", len(got), tailLines)
	}
	want := []string{"Loading shards: 10%", "Loading shards: 90%", "partial"}
	if diff := cmp.Diff(want, got[len(got)-3:]); diff != "" {
		t.Errorf("last lines (-want +got):\n%s", diff)
	}
	if got[0] != "line 12" {
		t.Errorf("oldest kept line = %q, want line 12", got[0])
	}
	if !strings.HasSuffix(file.String(), "90%\rpartial") || !tw.Wrote() {
		t.Error("the log file did not get the output verbatim")
	}
}

func TestTailKeepsTheOffloadCauseAboveTheTracebacks(t *testing.T) {
	tw := NewTail(&strings.Builder{})
	tw.Write([]byte(enginelogtest.Fixture(t, "vllm-0.32-cpu-offload-refusal.log")))
	if h := Hint(tw.Lines(), 8101); h != "" {
		t.Fatalf("the last %d lines alone gave a hint (%q): the fixture no longer tests the cues", tailLines, h)
	}
	cues := tw.Cues()
	if len(cues) == 0 || len(cues) > maxCues {
		t.Fatalf("cues %q", cues)
	}
	if h := Hint(cues, 8101); !strings.Contains(h, "--kv-offload off") || !strings.Contains(h, "CUDA, ROCm and XPU") {
		t.Errorf("Hint(cues) = %q", h)
	}
	for _, c := range cues {
		if !isCue(c) {
			t.Errorf("kept %q, which has no engineplan.OffloadRefusals marker", c)
		}
	}
}

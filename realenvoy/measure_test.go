package realenvoy_test

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/promtext"
	"github.com/lmwarden/warden/internal/simproc"
)

// run is what one farm's conversations measured.
type run struct {
	followUps, away, failed int
	cached, prompt          int64
}

func (r run) hits() float64 { return 100 * float64(r.cached) / float64(r.prompt) }

// TestPickersMeasured is issue 43's measurement through real Envoy: 16
// conversations of six turns over four simulated engines with KV events,
// once behind two pickers (Envoy spreading the streams; picker A SIGKILLed
// in the middle of round 3 and started again before round 4; both
// restarted before round 6; a third picker joining the busy farm during
// round 5) and once behind one picker on fresh engines. Goals asserted:
// no follow-up turn away from its (healthy) home, hits within one point of
// one picker's. Logged: the start-to-ready times, the KV-event batches and
// the memory of each picker (docs/epp.md, "Several pickers: measured").
func TestPickersMeasured(t *testing.T) {
	needEnvoy(t)
	var two, one run
	t.Run("two pickers", func(t *testing.T) { two = measureFarm(t, 2) })
	t.Run("one picker", func(t *testing.T) { one = measureFarm(t, 1) })
	t.Logf("two pickers: %d follow-ups, %d away from home, %d failed, hits %.2f %%", two.followUps, two.away, two.failed, two.hits())
	t.Logf("one picker:  %d follow-ups, %d away from home, %d failed, hits %.2f %%", one.followUps, one.away, one.failed, one.hits())
	if two.away != 0 || two.failed != 0 {
		t.Errorf("two pickers: %d follow-up turns away from home, %d failed; want none", two.away, two.failed)
	}
	if d := two.hits() - one.hits(); d < -1 || d > 1 {
		t.Errorf("hits with two pickers %.2f %%, with one %.2f %%: want within one point", two.hits(), one.hits())
	}
}

func measureFarm(t *testing.T, pickers int) run {
	var replicas []string
	for range 4 {
		_, spec := kvSim(t)
		replicas = append(replicas, "--replica", spec)
	}
	ps := []*picker{newPicker(t, "A", replicas)}
	if pickers == 2 {
		ps = append(ps, newPicker(t, "B", replicas))
	}
	f := &farm{eppGRPC: ps[0].grpcAddr(), eppHTTP: ps[0].url()}
	var more []string
	for _, p := range ps[1:] {
		more = append(more, "--epp", p.grpcAddr())
	}
	f.startEnvoy(t, replicas, more)
	f.envoyHealthy(t, ps...)
	var r run
	homes := map[string]string{}
	joiner := declarePicker(t, "C", replicas)
	joined := make(chan error, 1)
	for n := 1; n <= 6; n++ {
		switch {
		case pickers == 2 && n == 4:
			ps[0].start(t)
			t.Logf("picker A restarted after a SIGKILL: ready in %v", ps[0].readyIn.Round(time.Millisecond))
			f.envoyHealthy(t, ps...)
		case pickers == 2 && n == 5:
			bin := simproc.Binary(t)
			go func() { joined <- joiner.launch(bin) }() // a third picker joins the busy farm (not in Envoy's cluster: its start is measured)
		case pickers == 2 && n == 6:
			if err := <-joined; err != nil {
				t.Fatal(err)
			}
			t.Logf("picker C joined during round 5: ready in %v", joiner.readyIn.Round(time.Millisecond))
			for _, p := range ps {
				p.stop(syscall.SIGTERM)
			}
			for _, p := range ps {
				p.start(t)
			}
			t.Logf("both restarted: ready in %v and %v", ps[0].readyIn.Round(time.Millisecond), ps[1].readyIn.Round(time.Millisecond))
			f.envoyHealthy(t, ps...)
		}
		for c := range 16 {
			if pickers == 2 && n == 3 && c == 8 {
				ps[0].stop(syscall.SIGKILL) // mid-round: the rest of it through B (Envoy retries a refused stream there)
			}
			session := fmt.Sprintf("m%d-%d", pickers, c)
			tr := f.agentTurn(t, session, n)
			if tr.status != 200 || tr.replica == "" {
				r.failed++
				t.Errorf("%s turn %d: status %d, replica %q", session, n, tr.status, tr.replica)
				continue
			}
			if n == 1 {
				homes[session] = tr.replica
				continue
			}
			r.followUps++
			r.cached += tr.cached
			r.prompt += tr.prompt
			if tr.replica != homes[session] {
				r.away++
			}
		}
	}
	if pickers == 2 {
		for _, p := range append(ps, joiner) {
			batches, rss := pickerCost(t, p)
			t.Logf("picker %s: %d KV-event batches applied since its last start, RSS %.1f MiB", p.name, batches, rss)
		}
	}
	return r
}

var rssLine = regexp.MustCompile(`VmRSS:\s+(\d+) kB`)

// pickerCost is the KV-event batches a picker applied (its /metrics) and
// its resident memory in MiB (/proc).
func pickerCost(t *testing.T, p *picker) (int64, float64) {
	t.Helper()
	resp, err := http.Get(p.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	fams, err := promtext.Parse(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	batches, _ := fams.Sum("warden_kv_event_batches_total")
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	var rss float64
	if m := rssLine.FindSubmatch(status); m != nil {
		kb, _ := strconv.Atoi(string(m[1]))
		rss = float64(kb) / 1024
	}
	return int64(batches), rss
}

package realenvoy_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The history the joining picker replays: joinTurns turns of joinConvs
// conversations (docs/epp.md also gives 12,000 of 3,000: a full replay
// buffer of ~9,400 batches).
const joinTurns, joinConvs = 2000, 500

var liveLine = regexp.MustCompile(`msg="KV events: live" replica=(\d+) batches_replayed=(\d+) conversations=(\d+)`)

// TestPickerJoinsABusyFarm: four engines with KV events served joinTurns
// turns of joinConvs conversations (labelled as the pickers label them) and go
// on serving while a picker starts: it replays every engine's history
// before its ready line and knows every conversation. Logged: its
// start-to-ready time, the batches it replayed, its memory (docs/epp.md).
func TestPickerJoinsABusyFarm(t *testing.T) {
	needEnvoy(t) // the tier's gate: a picker's cost measured beside the others
	var replicas, urls []string
	for range 4 {
		s, spec := kvSim(t)
		replicas, urls = append(replicas, "--replica", spec), append(urls, s.URL)
	}
	var sent atomic.Int64
	turn := func(i int) {
		session := fmt.Sprintf("w%x", i%joinConvs)
		body := fmt.Sprintf(`{"model":"test-model","max_tokens":4,"messages":[{"role":"user","content":"%s %s"}]}`,
			session, strings.Repeat("read the file and fix it ", 10+i/joinConvs*10))
		req, _ := http.NewRequest(http.MethodPost, urls[i%joinConvs%4]+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", session)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			sent.Add(1)
		}
	}
	work := func(from, to int, stop <-chan struct{}) {
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := from + w; to < 0 || i < to; i += 16 {
					select {
					case <-stop:
						return
					default:
					}
					turn(i)
				}
			})
		}
		wg.Wait()
	}
	work(0, joinTurns, nil)
	if sent.Load() != joinTurns {
		t.Fatalf("%d of %d turns answered before the picker started", sent.Load(), joinTurns)
	}
	stop := make(chan struct{})
	busy := make(chan struct{})
	go func() { defer close(busy); work(joinTurns, -1, stop) }() // the farm stays busy while the picker joins
	p := newPicker(t, "J", replicas)
	close(stop)
	<-busy
	var batches, conversations int
	for _, m := range liveLine.FindAllStringSubmatch(p.out.String(), -1) {
		b, _ := strconv.Atoi(m[2])
		c, _ := strconv.Atoi(m[3])
		batches, conversations = batches+b, conversations+c
	}
	n, rss := pickerCost(t, p)
	t.Logf("picker joined a farm of 4 engines after %d turns (%d during its start): ready in %v, %d batches replayed "+
		"(%d applied by now), %d conversations known, RSS %.1f MiB", joinTurns, sent.Load()-joinTurns,
		p.readyIn.Round(time.Millisecond), batches, n, conversations, rss)
	if conversations != joinConvs {
		t.Errorf("the joining picker knows %d of the %d conversations at its start", conversations, joinConvs)
	}
}

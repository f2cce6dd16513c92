package realvllm_test

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMeasureStepTimes measures what the simulator's step-time profile
// for the tiny CPU model is fitted to (docs/vllm-cpu.md): time to first
// token of uncached prompts of several lengths (prefill), and the time
// between streamed tokens with 1, 4 and 8 sequences decoding at once, on
// one rank of `warden serve --device cpu --dp 2` (one core). It prints a
// table and runs only with WARDEN_MEASURE=1: it asserts nothing a regular
// run needs.
func TestMeasureStepTimes(t *testing.T) {
	needEngine(t)
	if os.Getenv("WARDEN_MEASURE") != "1" {
		t.Skip("a measurement, not a check: set WARDEN_MEASURE=1 to run it")
	}
	w := startWarden(t, nil, engineArgs(2, "--max-num-seqs", "8")...)
	url := w.status(t).Replicas[0].URL + "/v1/chat/completions"

	// Warm up (first requests compile nothing in eager mode, but allocate).
	stream(t, url, chat(msgs("user", words("warm", 50)), `,"stream":true,"max_tokens":16`))

	fmt.Println("prefill: prompt tokens, TTFT median of 5 (ms)")
	var prefill []float64
	for _, n := range []int{64, 256, 512, 1024, 1536, 2000} {
		var ttfts []float64
		var prompt int
		for i := 0; i < 5; i++ {
			// Unique first words so nothing is cached; about 2 chars a token.
			body := chat(msgs("user", words(fmt.Sprintf("p%d-%d-%d", n, i, time.Now().UnixNano()), n*2/3)),
				`,"stream":true,"max_tokens":1,"stream_options":{"include_usage":true}`)
			r := stream(t, url, body)
			ttfts = append(ttfts, r.ttft.Seconds()*1000)
			prompt = r.prompt
		}
		fmt.Printf("  %5d  %7.1f\n", prompt, median(ttfts))
		prefill = append(prefill, median(ttfts))
	}
	if prefill[len(prefill)-1] <= prefill[0] {
		t.Errorf("prefill of the longest prompt (%.1f ms) not slower than of the shortest (%.1f ms)", prefill[len(prefill)-1], prefill[0])
	}

	fmt.Println("decode: sequences, context, inter-token ms (median over the stream)")
	for _, ctxWords := range []int{20, 1300} {
		for _, b := range []int{1, 4, 8} {
			var wg sync.WaitGroup
			itls := make([][]float64, b)
			ctxTokens := make([]int, b)
			for i := 0; i < b; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					body := chat(msgs("user", words(fmt.Sprintf("d%d-%d-%d", b, i, time.Now().UnixNano()), ctxWords)),
						`,"stream":true,"max_tokens":200,"stream_options":{"include_usage":true}`)
					r := stream(t, url, body)
					itls[i], ctxTokens[i] = r.itl, r.prompt
				}()
			}
			wg.Wait()
			var all []float64
			for _, x := range itls {
				if len(x) > 20 {
					all = append(all, x[10:len(x)-10]...) // all b decoding: skip the ramps
				}
			}
			fmt.Printf("  %d  %5d  %6.2f\n", b, ctxTokens[0], median(all))
			if median(all) <= 0 {
				t.Errorf("%d sequences decoding: no inter-token times measured", b)
			}
		}
	}
}

type streamed struct {
	ttft   time.Duration
	itl    []float64 // ms between content chunks
	prompt int
}

func stream(t *testing.T, url, body string) streamed {
	t.Helper()
	start := time.Now()
	resp := postStream(t, url, body)
	defer resp.Body.Close()
	var r streamed
	last := time.Time{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		if p := jsonGet(d, "usage.prompt_tokens"); p.Exists() {
			r.prompt = int(p.Int())
			continue
		}
		if jsonGet(d, "choices.0.delta.role").Exists() || !jsonGet(d, "choices.0").Exists() {
			continue // the role chunk; a token whose text the detokenizer holds back still sends a chunk
		}
		now := time.Now()
		if last.IsZero() {
			r.ttft = now.Sub(start)
		} else {
			r.itl = append(r.itl, float64(now.Sub(last).Microseconds())/1000)
		}
		last = now
	}
	return r
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}

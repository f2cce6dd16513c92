package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/lmwarden/warden/router/place"
)

// The core's operations on the engines and its own settings at run time,
// as the admin endpoints and the data planes call them.

// maxModelsBody bounds an engine's /v1/models answer.
const maxModelsBody = 1 << 20

// Models is a healthy replica's GET /v1/models with its model's id set to
// the served name (vLLM's entry carries max_model_len, root and parent;
// some clients size their context from max_model_len); an engine that
// serves one model under several names, or adapters beside it, keeps its
// other entries. false when no healthy replica answered.
func (c *Core) Models(ctx context.Context) ([]byte, bool) {
	served := c.cfg.ServedModel
	for _, rep := range c.Replicas() {
		if !rep.Healthy() {
			continue
		}
		var body []byte
		err := c.getOK(ctx, rep.target.String()+"/v1/models", func(rd io.Reader) error {
			var err error
			body, err = io.ReadAll(io.LimitReader(rd, maxModelsBody))
			return err
		})
		data := gjson.GetBytes(body, "data")
		if err != nil || !data.IsArray() || len(data.Array()) == 0 {
			continue
		}
		at := 0
		for i, m := range data.Array() {
			if m.Get("id").Str == served {
				return body, true
			}
			if m.Get("parent").Type == gjson.Null || !m.Get("parent").Exists() {
				at = i // the base model, not an adapter
				break
			}
		}
		out, err := sjson.SetBytes(body, fmt.Sprintf("data.%d.id", at), served)
		if err != nil {
			continue
		}
		// Ranks that fit different contexts: the smallest holds anywhere.
		if least := c.smallestContext(); least > 0 && data.Array()[at].Get("max_model_len").Int() > int64(least) {
			if o, err := sjson.SetBytes(out, fmt.Sprintf("data.%d.max_model_len", at), least); err == nil {
				out = o
			}
		}
		return out, true
	}
	return nil, false
}

// Since is when the core was made.
func (c *Core) Since() time.Time { return c.since }

// smallestContext is the smallest max_model_len the healthy replicas serve.
func (c *Core) smallestContext() int {
	n := 0
	for _, r := range c.Replicas() {
		if v := int(r.maxModelLen.Load()); r.Healthy() && v > 0 && (n == 0 || v < n) {
			n = v
		}
	}
	return n
}

// PolicyInfo is the placement policy and its knobs as they are now.
type PolicyInfo struct {
	Policy             string   `json:"policy"`
	Policies           []string `json:"policies"`
	SpillThreshold     int      `json:"spill_threshold"`
	SpillThresholdAuto bool     `json:"spill_threshold_auto"`
	AdmitWaitSeconds   float64  `json:"admit_wait_s"`
	AdmitWaitAuto      bool     `json:"admit_wait_auto"`
	MoveCooldownTurns  int      `json:"move_cooldown_turns"`
	KVFill             float64  `json:"kv_fill"`
}

// Policy reports the placement policy and its knobs.
func (c *Core) Policy() PolicyInfo {
	pc := c.placer.Config()
	return PolicyInfo{Policy: pc.Policy, Policies: place.Policies(),
		SpillThreshold: c.cfg.SpillThreshold, SpillThresholdAuto: c.cfg.SpillThreshold == 0,
		AdmitWaitSeconds: c.cfg.AdmitWait.Seconds(), AdmitWaitAuto: c.cfg.AdmitWait == 0,
		MoveCooldownTurns: pc.Cooldown(), KVFill: pc.FillFraction()}
}

// SetPolicy switches the placement policy at run time; the session table is
// kept.
func (c *Core) SetPolicy(name string) (previous string, err error) {
	if err := place.ValidPolicy(name); err != nil {
		return "", err
	}
	previous = c.placer.SetPolicy(name)
	if previous != name {
		c.log.Info("policy switched", "policy", name, "previous", previous)
	}
	return previous, nil
}

// ResetResult is one replica's answer to POST /reset_prefix_cache.
type ResetResult struct {
	Rank   int    `json:"rank"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ResetPrefixCache asks every replica's engine to empty its prefix cache
// (vLLM's POST /reset_prefix_cache), concurrently, and forgets what the
// placement believed each emptied cache held.
func (c *Core) ResetPrefixCache(ctx context.Context) []ResetResult {
	reps := c.Replicas()
	res := make([]ResetResult, len(reps))
	var wg sync.WaitGroup
	for i, rep := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = c.resetOne(ctx, rep)
		}()
	}
	wg.Wait()
	return res
}

func (c *Core) resetOne(ctx context.Context, rep *Replica) ResetResult {
	out := ResetResult{Rank: rep.rank}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.target.String()+"/reset_prefix_cache", nil)
	if err == nil {
		var resp *http.Response
		if resp, err = c.client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			out.Status = resp.StatusCode
			switch {
			case resp.StatusCode == http.StatusNotFound:
				err = errors.New("the engine has no /reset_prefix_cache: vLLM serves it only in dev mode " +
					"(start the warden with VLLM_SERVER_DEV_MODE=1 in its environment; its engines inherit it)")
			case resp.StatusCode/100 != 2:
				err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
			}
		}
	}
	if err != nil {
		out.Error = err.Error()
		return out
	}
	c.cacheWiped(rep.rank, "POST /reset_prefix_cache")
	return out
}

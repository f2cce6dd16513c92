package serve

import (
	"strings"
	"testing"

	"github.com/lmwarden/warden/router/schema"
)

// The picker's ready lines name each endpoint's host and the max_num_seqs
// it uses (issue 45: 256 assumed for engines of 32 went unseen).
func TestEPPReadyNamesEndpointsAndTheirLimits(t *testing.T) {
	st := schema.Status{Policy: "adaptive", Replicas: []schema.Replica{
		{Rank: 0, URL: "http://10.0.0.5:8000", Up: true, MaxNumSeqs: 256},
		{Rank: 1, URL: "http://10.0.0.6:8000", Up: true, MaxNumSeqs: 32},
	}}
	var b strings.Builder
	printEPPReady(&b, EPPConfig{GRPCAddr: "127.0.0.1:9002", HTTPAddr: "127.0.0.1:9090"}, st)
	if !strings.Contains(b.String(), "2 of 2 endpoints up") || !strings.Contains(b.String(), "10.0.0.5:8000 256, 10.0.0.6:8000 32") {
		t.Errorf("ready lines:\n%s", b.String())
	}
}

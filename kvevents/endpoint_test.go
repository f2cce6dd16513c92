package kvevents

import "testing"

func TestEndpointRules(t *testing.T) {
	binds := map[string]bool{
		"tcp://*:5557": true, "tcp://[::]:5557": true, "tcp://[::1]:5557": true,
		"ipc:///tmp/x": true, "inproc://x": true,
		"tcp://127.0.0.1:5557": false, "tcp://host:5557": false,
	}
	for ep, want := range binds {
		if got := IsBindEndpoint(ep); got != want {
			t.Errorf("IsBindEndpoint(%q) = %v, want %v", ep, got, want)
		}
	}
	ranks := []struct {
		ep   string
		rank int
		want string
		err  bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", false},
		{"tcp://*:5557", 2, "tcp://*:5559", false},
		{"tcp://127.0.0.1:0", 1, "tcp://127.0.0.1:0", false},
		{"inproc://ev", 1, "inproc://ev_dp1", false},
		{"ipc:///tmp/ev", 0, "ipc:///tmp/ev", false},
		{"ipc:///tmp/ev", 1, "", true},
		{"", 3, "", false},
	}
	for _, tc := range ranks {
		got, err := RankEndpoint(tc.ep, tc.rank)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("RankEndpoint(%q, %d) = %q, %v; want %q (error %v)", tc.ep, tc.rank, got, err, tc.want, tc.err)
		}
	}
}

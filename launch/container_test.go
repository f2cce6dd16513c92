package launch

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// TestOwnerGone: a container's owner label names a live warden (this
// process), a dead one (a child that exited), one whose pid was reused (a
// start time that does not match), or one of another host (never ours to
// remove).
func TestOwnerGone(t *testing.T) {
	host, _ := os.Hostname()
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	self := Owner()
	for _, tc := range []struct {
		name, owner string
		gone        bool
	}{
		{"this warden", self, false},
		{"a warden that exited", host + "/" + strconv.Itoa(child.Process.Pid) + "/1", true},
		{"a pid reused since", host + "/1/12345", true},
		{"another host's", "elsewhere/" + strconv.Itoa(child.Process.Pid) + "/1", false},
		{"not an owner label", "x", false},
	} {
		if got := ownerGone(tc.owner); got != tc.gone {
			t.Errorf("%s (%s): gone %v, want %v", tc.name, tc.owner, got, tc.gone)
		}
	}
}

// TestOwnerGoneFailsSafe: what cannot be read of the owner counts as a
// live owner; only proof of its end makes its containers leftovers.
func TestOwnerGoneFailsSafe(t *testing.T) {
	const owner = "h/42/1000"
	hidden := errors.New("permission denied")
	for _, tc := range []struct {
		name  string
		probe procProbe
		gone  bool
	}{
		{"running, same start", probe(true, nil, 1000, nil, false), false},
		{"no such process", probe(false, nil, 0, hidden, false), true},
		{"existence unknown", probe(false, hidden, 0, hidden, false), false},
		{"start time unreadable (hidden /proc)", probe(true, nil, 0, hidden, false), false},
		{"pid reused (another start)", probe(true, nil, 2000, nil, false), true},
		{"a zombie", probe(true, nil, 1000, nil, true), true},
	} {
		if got := ownerGoneBy(owner, "h", 1, tc.probe); got != tc.gone {
			t.Errorf("%s: gone %v, want %v", tc.name, got, tc.gone)
		}
	}
}

func probe(exists bool, existsErr error, start int64, startErr error, zombie bool) procProbe {
	return procProbe{
		exists: func(int) (bool, error) { return exists, existsErr },
		start:  func(int) (int64, error) { return start, startErr },
		zombie: func(int) (bool, error) { return zombie, nil },
	}
}

package launch

import (
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

package launch

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"unsafe"
)

// TestOwnerGoneZombie: a warden that exited but was not reaped yet (a
// zombie: its parent has not waited) is gone; its containers are
// leftovers. The start time of a zombie still reads as the owner's.
func TestOwnerGoneZombie(t *testing.T) {
	host, _ := os.Hostname()
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	owner := host + "/" + strconv.Itoa(pid) + "/" + strconv.FormatInt(startMillis(pid), 10)
	if ownerGone(owner) {
		t.Fatalf("a running owner (%s) taken as gone", owner)
	}
	// Kill it and wait for the zombie without reaping it (WNOWAIT).
	child.Process.Signal(syscall.SIGKILL)
	var info [128]byte // siginfo_t
	if _, _, e := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid), uintptr(unsafe.Pointer(&info)),
		syscall.WEXITED|0x1000000 /* WNOWAIT */, 0, 0); e != 0 {
		t.Fatalf("waitid: %v", e)
	}
	defer child.Wait()
	if !ownerGone(owner) {
		t.Errorf("a zombie owner (%s) taken as alive: its containers would stay", owner)
	}
}

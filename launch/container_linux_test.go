package launch

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestWatchdogRemovesTheContainerOfAKilledCLI: the runtime's CLI SIGKILLed
// (with the warden, by the OOM killer, by a group kill): its watchdog, in
// a session of its own, removes the container by the id the CLI wrote.
func TestWatchdogRemovesTheContainerOfAKilledCLI(t *testing.T) {
	dir := t.TempDir()
	record := dir + "/runtime-calls"
	runtime := dir + "/fake-docker"
	if err := os.WriteFile(runtime, []byte("#!/bin/sh\necho \"$@\" >> "+record+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Container{Runtime: runtime, Name: "warden-x-rank0", CIDFile: dir + "/warden-x-rank0.cid"}
	cli := exec.Command("/bin/sh", "-c", "echo c0ffee > "+c.CIDFile+"; exec sleep 600") // the CLI: writes the id, runs
	cli.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.watch(cli.Process.Pid); err != nil {
		t.Fatal(err)
	}
	for { // the watchdog has read the id once the CLI wrote it; give it the file first
		if b, _ := os.ReadFile(c.CIDFile); len(b) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(-cli.Process.Pid, syscall.SIGKILL) // the CLI's whole group, as a group kill does
	cli.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(record)
		if strings.Contains(string(b), "rm -f c0ffee") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container was not removed after its CLI was killed; runtime calls: %q", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

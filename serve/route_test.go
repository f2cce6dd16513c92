package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simproc"
	"github.com/lmwarden/warden/router"
	"github.com/lmwarden/warden/router/schema"
)

// startRoute runs `warden route` with args on port and waits for its
// "ready at" line.
func startRoute(t testing.TB, port int, args ...string) *wardenProc {
	t.Helper()
	argv := append([]string{"route", "--port", strconv.Itoa(port), "--drain-timeout", "5s"}, args...)
	return startWarden(t, "http://127.0.0.1:"+strconv.Itoa(port), argv...)
}

// startWarden runs the warden binary with argv in its own process group and
// waits until it prints "ready at url".
func startWarden(t testing.TB, url string, argv ...string) *wardenProc {
	t.Helper()
	cmd := exec.Command(simproc.Binary(t), argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &wardenProc{cmd: cmd, url: url, stderr: &simproc.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "ready at "+w.url) {
				ready <- struct{}{}
			}
		}
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	select {
	case <-ready:
	case err := <-w.done:
		t.Fatalf("warden %s exited before ready: %v\n%s", argv[0], err, w.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("warden %s not ready after 60s\n%s", argv[0], w.stderr)
	}
	return w
}

// stop SIGINTs the warden and waits for it to exit 0.
func (w *wardenProc) stop(t testing.TB) {
	t.Helper()
	if err := w.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.done:
		if err != nil {
			t.Fatalf("warden exited with %v\n%s", err, w.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("warden did not exit after SIGINT\n%s", w.stderr)
	}
}

// status reads the warden's /warden/status.
func (w *wardenProc) status(t testing.TB) schema.Status {
	t.Helper()
	resp, err := http.Get(w.url + "/warden/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st schema.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// upURLs maps each replica URL to whether it is up, and rank to URL.
func upURLs(st schema.Status) (map[string]bool, map[string]string) {
	up, urlOf := map[string]bool{}, map[string]string{}
	for _, r := range st.Replicas {
		up[r.URL], urlOf[strconv.Itoa(r.Rank)] = r.Up, r.URL
	}
	return up, urlOf
}

// turn sends one chat turn of a session and returns the replica URL that
// served it and the route reason.
func turn(t *testing.T, w *wardenProc, urlOf map[string]string, session string) (string, string) {
	t.Helper()
	body := `{"model":"test-model","max_tokens":4,"messages":[{"role":"user","content":"turn of ` + session + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, w.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("session %s: %d %s", session, resp.StatusCode, b)
	}
	return urlOf[resp.Header.Get("X-Warden-Replica")], resp.Header.Get("X-Warden-Route")
}

// adminJSON sends an admin request to the warden and returns the status.
func adminJSON(t *testing.T, method, url, body string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// routeFleet is a `warden route` in front of simulator processes started
// outside it, and where each test session lives.
type routeFleet struct {
	w, w2   *wardenProc
	a, b, d *simproc.Proc
	cURL    string
	cPort   int
	port    int
	state   string
	home    map[string]string // session -> replica URL
	urlOf   map[string]string // rank -> replica URL
}

func TestRouteFrontsRunningServersThroughChangesAndARestart(t *testing.T) {
	f := &routeFleet{home: map[string]string{}}
	f.startWithOneDown(t)
	f.downComesUpAndOneIsAdded(t)
	f.removeOne(t)
	f.restart(t)
}

// startWithOneDown: replicas a (max_num_seqs 8, given), b and c (down);
// six conversations land on a and b.
func (f *routeFleet) startWithOneDown(t *testing.T) {
	f.a = simproc.Start(t, "--max-num-seqs", "8")
	f.b = simproc.Start(t, "--max-num-seqs", "64")
	f.cPort = simproc.FreePort(t)
	f.cURL = "http://127.0.0.1:" + strconv.Itoa(f.cPort)
	f.state = filepath.Join(t.TempDir(), "sessions.json")
	f.port = simproc.FreePort(t)
	f.w = startRoute(t, f.port, "--replica", f.a.URL+"#max_num_seqs=8", "--replica", f.b.URL+","+f.cURL,
		"--max-num-seqs", "64", "--state-file", f.state, "--state-interval", "200ms", "--policy", "sticky",
		"--ramp-up", "0") // the replicas that come up take the new conversations at once (ramping: TestRampUp...)
	st := f.w.status(t)
	var rows []string
	for _, r := range st.Replicas {
		rows = append(rows, fmt.Sprintf("%s up=%v seqs=%d", r.URL, r.Up, r.MaxNumSeqs))
	}
	wantRows := []string{f.a.URL + " up=true seqs=8", f.b.URL + " up=true seqs=64", f.cURL + " up=false seqs=64"}
	if strings.Join(rows, "\n") != strings.Join(wantRows, "\n") || st.Model != "test-model" {
		t.Fatalf("replicas at start:\n%s\nwant:\n%s\n(model %q)", strings.Join(rows, "\n"), strings.Join(wantRows, "\n"), st.Model)
	}
	_, f.urlOf = upURLs(st)
	for i := range 6 {
		s := "first-" + strconv.Itoa(i)
		u, route := turn(t, f.w, f.urlOf, s)
		if route != "new" || u == f.cURL {
			t.Errorf("session %s: %s on %s, want new on a replica that is up", s, route, u)
		}
		f.home[s] = u
	}
}

// downComesUpAndOneIsAdded: c starts answering and enters rotation; d is
// added over HTTP; new conversations go to the two empty replicas.
func (f *routeFleet) downComesUpAndOneIsAdded(t *testing.T) {
	simproc.StartNoWait(t, "--port", strconv.Itoa(f.cPort))
	simproc.Poll(t, "the replica down at start is in rotation", func() bool { up, _ := upURLs(f.w.status(t)); return up[f.cURL] })
	f.d = simproc.Start(t)
	if code := adminJSON(t, http.MethodPost, f.w.url+"/warden/replicas", `{"url":"`+f.d.URL+`"}`); code != http.StatusCreated {
		t.Fatalf("POST /warden/replicas: %d", code)
	}
	simproc.Poll(t, "the added replica is in rotation", func() bool { up, _ := upURLs(f.w.status(t)); return up[f.d.URL] })
	_, f.urlOf = upURLs(f.w.status(t))
	for i := range 4 {
		s := "second-" + strconv.Itoa(i)
		u, route := turn(t, f.w, f.urlOf, s)
		if route != "new" || (u != f.cURL && u != f.d.URL) {
			t.Errorf("session %s: %s on %s, want new on %s or %s", s, route, u, f.cURL, f.d.URL)
		}
		f.home[s] = u
	}
}

// removeOne: a is removed over HTTP; its conversations fail over on their
// next turn, the others stay.
func (f *routeFleet) removeOne(t *testing.T) {
	if code := adminJSON(t, http.MethodDelete, f.w.url+"/warden/replicas?url="+f.a.URL, ""); code != http.StatusOK {
		t.Fatalf("DELETE /warden/replicas: %d", code)
	}
	if st := f.w.status(t); st.Sessions != len(f.home) {
		t.Errorf("sessions after the removal = %d, want %d", st.Sessions, len(f.home))
	}
	moved := 0
	for s, was := range f.home {
		u, route := turn(t, f.w, f.urlOf, s)
		switch {
		case was == f.a.URL && (route != "failover" || u == f.a.URL):
			t.Errorf("session %s homed on the removed replica: %s on %s, want failover elsewhere", s, route, u)
		case was != f.a.URL && (route != "sticky" || u != was):
			t.Errorf("session %s: %s on %s, want sticky on %s", s, route, u, was)
		}
		if was == f.a.URL {
			moved++
		}
		f.home[s] = u
	}
	if moved == 0 {
		t.Errorf("no session was homed on the removed replica %s: %v", f.a.URL, f.home)
	}
}

// restart: SIGINT (summary, table saved, no replica stopped), then a new
// router that lists its replicas in another order (other ranks) and
// without the removed one: every conversation stays on its URL.
func (f *routeFleet) restart(t *testing.T) {
	f.w.stop(t)
	if out := f.w.stderr.String(); !strings.Contains(out, "warden summary for test-model") || !strings.Contains(out, "session table saved") {
		t.Errorf("exit output lacks the summary or the save:\n%s", out)
	}
	for _, u := range []string{f.a.URL, f.b.URL, f.cURL, f.d.URL} {
		if resp, err := http.Get(u + "/health"); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("replica %s after the router exited: %v %v", u, resp, err)
		}
	}
	f.w2 = startRoute(t, f.port, "--replica", f.d.URL+","+f.cURL+","+f.b.URL, "--state-file", f.state, "--policy", "sticky")
	_, f.urlOf = upURLs(f.w2.status(t))
	for s, was := range f.home {
		if u, route := turn(t, f.w2, f.urlOf, s); route != "sticky" || u != was {
			t.Errorf("after the restart, session %s: %s on %s, want sticky on %s", s, route, u, was)
		}
	}
	f.w2.stop(t)
}

func TestSyncReplicasMakesTheProxyMatchTheList(t *testing.T) {
	var urls []string
	for range 3 {
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, err := parseReplicas(urls[:2], 32, 1)
	if err != nil {
		t.Fatal(err)
	}
	core, err := router.New(router.Config{Logger: log}, first)
	if err != nil {
		t.Fatal(err)
	}
	next, _ := parseReplicas([]string{urls[2], urls[1] + "/"}, 32, 1)
	if added, removed := syncReplicas(core, next, log); added != 1 || removed != 1 {
		t.Errorf("added %d removed %d, want 1 and 1", added, removed)
	}
	var got []string
	for _, r := range core.Status().Replicas {
		got = append(got, strconv.Itoa(r.Rank)+" "+r.URL)
	}
	if want := []string{"1 " + urls[1], "2 " + urls[2]}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("replicas after the reload %v, want %v (kept ones keep their rank)", got, want)
	}
	if added, removed := syncReplicas(core, next, log); added != 0 || removed != 0 {
		t.Errorf("a second identical reload added %d removed %d, want nothing", added, removed)
	}
}

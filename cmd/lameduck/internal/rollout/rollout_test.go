package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain doubles as the replica of TestRunInProcess: started with
// ROLLOUT_TEST_WINDOW set, the test binary is a small server instead, on
// the port of its --port=N argument, or $PORT without one.
func TestMain(m *testing.M) {
	if w := os.Getenv("ROLLOUT_TEST_WINDOW"); w != "" {
		port := os.Getenv("PORT")
		for _, a := range os.Args[1:] {
			if p, ok := strings.CutPrefix(a, "--port="); ok {
				port = p
			}
		}
		testServer(port, w)
		return
	}
	goleak.VerifyTestMain(m)
}

// testServer serves GET /, POST /echo and /readyz on 127.0.0.1:port; at
// SIGTERM /readyz turns 503, and after window the server shuts down. With
// ROLLOUT_TEST_LAST_WRITE=DIR, its last act before exiting 0 is to write
// DIR/PORT: the last write of a service, lost if it is SIGKILLed.
func testServer(port, window string) {
	win, err := time.ParseDuration(window)
	if err != nil {
		os.Exit(3)
	}
	var draining atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: mux}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		<-sig
		draining.Store(true)
		time.Sleep(win)
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, err) // "address already in use" when the port is taken
		os.Exit(1)
	}
	if dir := os.Getenv("ROLLOUT_TEST_LAST_WRITE"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, port), []byte("done"), 0o644); err != nil {
			os.Exit(4)
		}
	}
}

// runOptions are the options of the in-process rollouts: two replicas of
// this test binary with window, one round, fast readiness polls (a probe
// that times out is one that took seconds: 5s, as the kubelet's
// timeoutSeconds would be).
func runOptions(window string) Options {
	return Options{Command: []string{os.Args[0], "--port={port}"}, Env: []string{"ROLLOUT_TEST_WINDOW=" + window},
		Load: Load{Rounds: 1, Rate: 100, GetPath: "/", PostPath: "/echo", Timeout: 30 * time.Second,
			Warmup: 200 * time.Millisecond, Cooldown: 200 * time.Millisecond},
		Replicas: 2, Mode: ModeL7,
		ProbePath: "/readyz", ProbePeriod: 100 * time.Millisecond, ProbeFailures: 3, ProbeTimeout: 5 * time.Second,
		RemovalMin: 500 * time.Millisecond, RemovalMax: 600 * time.Millisecond, Grace: 30 * time.Second, StopTimeout: 30 * time.Second,
		StartTimeout: 20 * time.Second}
}

// TestRunInProcess runs the whole rollout under the race detector, with
// this test binary as the replicas: a 10s window outlasts the at most
// 600ms endpoint removal by seconds, so even a balancer goroutine kept off
// the CPU for seconds between picking a replica and writing to it finds it
// serving (no failure); no window at all fails requests. The request
// timeout is generous (30s): under -race on a loaded 2-core machine an
// answer may take seconds, and a slow answer is no dropped one. The two
// cases run side by side: the long one lasts about its window.
func TestRunInProcess(t *testing.T) {
	for _, c := range []struct {
		window string
		fails  bool
	}{{"10s", false}, {"0s", true}} {
		t.Run("window="+c.window, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			lastDone := 0
			opt := runOptions(c.window)
			opt.Progress = func(done, total, requests, failed int) {
				mu.Lock()
				lastDone = done
				mu.Unlock()
			}
			rep, err := Run(context.Background(), opt)
			if err != nil {
				t.Fatal(err)
			}
			if c.fails != (rep.Failed > 0) || rep.Requests == 0 {
				var b strings.Builder
				_ = rep.WriteText(&b)
				t.Fatalf("window %s: %d of %d failed; want failures: %v\n%s", c.window, rep.Failed, rep.Requests, c.fails, b.String())
			}
			// A replica that stops at once fails requests in whichever way
			// the timing picks: refused (its listener is gone), reset, or EOF
			// (it closed a connection with a request on it; 11 EOF and no
			// refusal in one run). Each says the replica left under its
			// clients.
			if gone := rep.Failures[KindRefused] + rep.Failures[KindReset] + rep.Failures[KindEOF]; c.fails && gone == 0 {
				t.Errorf("failures %v; want refused, reset or EOF: a replica that left under its clients", rep.Failures)
			}
			mu.Lock()
			if lastDone != 2 {
				t.Errorf("progress saw %d restarts done; want 2", lastDone)
			}
			mu.Unlock()
			if err := rep.WriteHTMLFile(t.TempDir() + "/r.html"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A command that reads PORT needs no {port} in its arguments: every
// replica finds its own port in its environment.
func TestCommandReadsPORT(t *testing.T) {
	opt := runOptions("0s")
	opt.Command = []string{os.Args[0]} // no --port={port}: the server reads $PORT
	opt.Replicas = 1
	rep, err := Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ReplicaReports) != 2 || rep.Requests == 0 {
		t.Fatalf("%d replicas, %d requests; want 2 replicas that served", len(rep.ReplicaReports), rep.Requests)
	}
	for _, r := range rep.ReplicaReports {
		if r.Ready == nil || r.Requests == 0 {
			t.Errorf("replica %d on port %d: ready %v, %d requests; want it ready and serving on $PORT", r.ID, r.Port, r.Ready, r.Requests)
		}
	}
}

// The replicas left at the end (the last set) are stopped like a service,
// with SIGTERM and time to drain, never SIGKILLed at once: each one's last
// write after its drain is done, and it exits 0.
func TestLastSetDrainsAtTheEnd(t *testing.T) {
	dir := t.TempDir()
	opt := runOptions("500ms")
	opt.Replicas = 1
	opt.Env = append(opt.Env, "ROLLOUT_TEST_LAST_WRITE="+dir)
	rep, err := Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ReplicaReports) != 2 {
		t.Fatalf("%d replicas; want 2", len(rep.ReplicaReports))
	}
	last := rep.ReplicaReports[1]
	if last.Sigterm != nil || last.Stopped == nil || last.StopToExit == nil {
		t.Fatalf("the last replica: SIGTERM %v, stopped %v, stop→exit %v; want it stopped at the end", last.Sigterm, last.Stopped, last.StopToExit)
	}
	if last.Killed || last.ExitCode != 0 || *last.StopToExit < 0.5 {
		t.Errorf("the last replica: killed %v, exit %d, %.2fs from SIGTERM to exit; want exit 0 after its 500ms drain", last.Killed, last.ExitCode, *last.StopToExit)
	}
	for _, r := range rep.ReplicaReports {
		if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(r.Port))); err != nil {
			t.Errorf("replica %d: its last write is missing (%v)", r.ID, err)
		}
	}
}

// A replica still running --stop-timeout after its SIGTERM at the end is
// SIGKILLed then, and the run says so.
func TestStopTimeoutKills(t *testing.T) {
	opt := runOptions("1h") // never exits by itself
	opt.Replicas = 1
	opt.Grace, opt.StopTimeout = time.Second, time.Second
	var warned warnLog
	opt.Warn = warned.add
	rep, err := Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	last := rep.ReplicaReports[len(rep.ReplicaReports)-1]
	if last.Stopped == nil || !last.Killed {
		t.Errorf("the last replica: stopped %v, killed %v; want SIGKILLed after --stop-timeout", last.Stopped, last.Killed)
	}
	warnings := warned.all()
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "--stop-timeout") }) {
		t.Errorf("warnings %q; want one naming --stop-timeout", warnings)
	}
}

// warnLog keeps the warnings a run gives Options.Warn. It is safe for
// concurrent use.
type warnLog struct {
	mu   sync.Mutex
	list []string // guarded by mu
}

func (w *warnLog) add(s string) {
	w.mu.Lock()
	w.list = append(w.list, s)
	w.mu.Unlock()
}

// all returns a copy of the warnings given so far.
func (w *warnLog) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}

// takenPort holds a loopback port for the test, and makes pickPort hand it
// out first times before the kernel's free ports.
func takenPort(t *testing.T, times int) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	taken := ln.Addr().(*net.TCPAddr).Port
	var mu sync.Mutex
	handed := 0
	t.Cleanup(func() { pickPort = freePort })
	pickPort = func(used map[int]bool) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if handed < times {
			handed++
			return taken, nil
		}
		return freePort(used)
	}
	return taken
}

// A replica whose port another process bound first (it exits with "address
// already in use") is started again on another port, under the same id,
// with a warning; the report lists the replica that ran, not the attempt.
func TestPortTakenStartsAgain(t *testing.T) {
	taken := takenPort(t, 1)
	var warned warnLog
	opt := runOptions("0s")
	opt.Replicas = 1
	opt.Warn = warned.add
	rep, err := Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	warnings := warned.all()
	want := fmt.Sprintf("replica 1: another process took port %d", taken)
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
		t.Errorf("warnings %q; want one starting %q", warnings, want)
	}
	var ids []int
	for _, r := range rep.ReplicaReports {
		ids = append(ids, r.ID)
		if r.Port == taken || r.Ready == nil {
			t.Errorf("replica %d on port %d (ready %v); want a ready replica on another port than %d", r.ID, r.Port, r.Ready, taken)
		}
	}
	if !slices.Equal(ids, []int{1, 2}) {
		t.Errorf("the report lists replicas %v; want [1 2]", ids)
	}
}

// A command whose port is taken every time (one that ignores {port}, say)
// is not started again for ever: the rollout cannot run, and says why.
func TestPortTakenEveryTime(t *testing.T) {
	takenPort(t, portAttempts)
	opt := runOptions("0s")
	opt.Replicas = 1
	_, err := Run(context.Background(), opt)
	if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), "address already in use") ||
		!strings.Contains(err.Error(), fmt.Sprintf("%d ports in a row were in use", portAttempts)) {
		t.Fatalf("Run = %v; want a setup error naming the port in use and the %d attempts", err, portAttempts)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, KindRefused},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, KindReset},
		{&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, KindReset},
		{fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), KindEOF},
		{io.EOF, KindEOF},
		{errors.New("http: server closed idle connection"), KindEOF},
		{os.ErrDeadlineExceeded, KindTimeout},
		{fmt.Errorf("dial: %w", errNoEndpoint), KindNoEndpoint},
		{errors.New("something else"), KindOther},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Options{Command: []string{"srv", "--port={port}"}, Load: Load{Rounds: 1, Rate: 1, GetPath: "/", Timeout: time.Second},
		Replicas: 1, Mode: ModeL7, ProbePath: "/readyz", ProbePeriod: time.Second, ProbeFailures: 1, ProbeTimeout: time.Second,
		RemovalMin: time.Second, RemovalMax: time.Second, Grace: time.Second, StopTimeout: time.Second, StartTimeout: time.Second}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	noPort := good
	noPort.Command = []string{"srv"} // it reads PORT
	if err := noPort.Validate(); err != nil {
		t.Errorf("a command without {port}: %v; want it accepted (it may read PORT)", err)
	}
	for _, c := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Command = nil }, "no command"},
		{func(o *Options) { o.StopTimeout = 0 }, "--stop-timeout=0s"},
		{func(o *Options) { o.Replicas = 0 }, "--replicas=0"},
		{func(o *Options) { o.Mode = "l3" }, `--mode="l3"`},
		{func(o *Options) { o.RemovalMin = 2 * time.Second }, "--removal-delay"},
		{func(o *Options) { o.GetPath = "" }, "no load"},
	} {
		o := good
		c.change(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}

// TestPoolNeverRetries: a keep-alive connection that the server closes is
// a failed request for the L7 balancer (as for an ingress without retries),
// never silently re-sent, and the next request dials afresh.
func TestPoolNeverRetries(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	defer func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	}()

	// A timeout far beyond the test's own steps: none may fire in a passing
	// run, however slowly the machine answers.
	p := &pool{addr: ln.Addr().String(), timeout: 30 * time.Second}
	defer p.close()
	answer := func(c net.Conn) {
		t.Helper()
		buf := make([]byte, 4096)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("reading the pool's request: %v", err)
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
	// get sends a GET through the pool, answers it on the connection the
	// pool dials for it (the which one), closed when the test ends, and
	// returns that connection.
	get := func(which string) net.Conn {
		t.Helper()
		errc := make(chan error, 1)
		go func() {
			_, _, err := p.roundTrip(http.MethodGet, "/", http.Header{}, nil)
			errc <- err
		}()
		c := within(t, conns, "the pool's "+which+" dial")
		t.Cleanup(func() { _ = c.Close() })
		answer(c)
		if err := within(t, errc, "the "+which+" request's answer"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := get("first")
	_ = first.Close() // the server closes the idle keep-alive connection
	_, _, err = p.roundTrip(http.MethodGet, "/", http.Header{}, nil)
	if err == nil || classify(err) != KindEOF && classify(err) != KindReset {
		t.Fatalf("request on the closed connection: %v (%s); want EOF or reset, not a retry", err, classify(err))
	}
	get("second")
}

// within receives from ch, or fails the test after 10s (a hang guard, not
// a synchronisation).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		panic("unreachable")
	}
}

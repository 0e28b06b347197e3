package main

// End-to-end tests: the real `lameduck demo` binary (built once by TestMain),
// started as a child process on 127.0.0.1:0 with JSON logs and a controlled
// environment, driven with real signals and real HTTP clients.
//
// Timing bounds are generous for a loaded 2-core CI box but real. No test
// sleeps to synchronise: tests wait on log lines, probe answers and the
// process's exit, polling at short intervals under deadlines. The only
// deliberate pauses are a traffic cadence (a request every 50ms) and the
// schedule of a second signal "about 300ms after the first".

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
)

const (
	// startTimeout bounds how long a freshly started process may take to
	// log "lameduck: listening" (or to exit, for a bad configuration).
	startTimeout = 20 * time.Second
	// reqTimeout bounds every HTTP request that is expected to be quick.
	reqTimeout = 10 * time.Second
	// pollEvery is the interval of every wait on a state.
	pollEvery = 5 * time.Millisecond
	// logSkew is how much later than the sequence's t = 0 the "lameduck:
	// draining" line may be stamped: the process stamps t = 0 first and
	// writes the line next (microseconds; more under -race on a busy
	// machine), and its window is timed from t = 0. A window measured from
	// that line's time is its length minus this. A 1.9997s reading of a 2s
	// window failed TestE2EFiber.
	logSkew = 100 * time.Millisecond
)

// logLine is one line the child wrote to stderr (or stdout), as read.
type logLine struct {
	raw string         // the line without its newline
	rec map[string]any // the line as a JSON object; nil when it is not JSON
}

func (l logLine) msg() string {
	s, _ := l.rec["msg"].(string)
	return s
}

// messages returns the line's msg and, for a record of several errors, each
// element of its "errors" array.
func (l logLine) messages() []string {
	out := []string{l.msg()}
	errs, _ := l.rec["errors"].([]any)
	for _, e := range errs {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// proc is one running `lameduck demo`.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	started time.Time // just before the process was started
	base    string    // "http://" + the bound address, once listening
	client  *http.Client

	mu     sync.Mutex
	lines  []logLine     // guarded by mu
	eof    bool          // guarded by mu: stderr reached EOF
	notify chan struct{} // guarded by mu: closed and replaced on every change

	readerDone chan struct{} // closed when the output reader has returned
	exited     chan struct{} // closed when cmd.Wait has returned
	exitAt     time.Time     // written before exited is closed
	waitErr    error         // written before exited is closed
}

// childEnv returns the test's environment without any LAMEDUCK_* variable
// or KUBERNETES_SERVICE_HOST (so the local defaults apply), plus extra.
func childEnv(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LAMEDUCK_") || k == "KUBERNETES_SERVICE_HOST" {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// startProc starts `lameduck demo --log-format json` with args and the
// LAMEDUCK_* variables in env, and begins reading its output. It does not
// wait for the process to listen; see listening.
func startProc(t *testing.T, env map[string]string, args ...string) *proc {
	t.Helper()
	return startCmd(t, env, append([]string{"demo", "--log-format", "json", "--server", demoServer(t)}, args...)...)
}

// startCmd starts `lameduck argv...` with the LAMEDUCK_* variables in env,
// and begins reading its output.
func startCmd(t *testing.T, env map[string]string, argv ...string) *proc {
	t.Helper()
	if lameduckBin == "" {
		t.Fatal("the lameduck binary was not built; TestMain did not run")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lameduckBin, argv...)
	cmd.Env = childEnv(env)
	// An *os.File is handed to the child as is: no copying goroutine, so
	// cmd.Wait returns when the process exits, and our reader alone drains
	// the pipe (the child can never block on a full pipe).
	cmd.Stdout, cmd.Stderr = w, w
	p := &proc{
		t:          t,
		cmd:        cmd,
		notify:     make(chan struct{}),
		readerDone: make(chan struct{}),
		exited:     make(chan struct{}),
		client: &http.Client{
			Transport: &http.Transport{Proxy: nil},
			Timeout:   reqTimeout,
		},
	}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		t.Fatalf("start %s: %v", lameduckBin, err)
	}
	w.Close() // the child holds its own copy; EOF comes when it exits

	go p.read(r)
	go func() {
		err := cmd.Wait()
		p.exitAt = time.Now()
		p.waitErr = err
		close(p.exited)
	}()

	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		<-p.readerDone
		p.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("output of lameduck %s:\n%s", strings.Join(argv, " "), p.output())
		}
	})
	return p
}

// read buffers every output line until EOF.
func (p *proc) read(r *os.File) {
	defer close(p.readerDone)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		l := logLine{raw: sc.Text()}
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			l.rec = rec
		}
		p.mu.Lock()
		p.lines = append(p.lines, l)
		close(p.notify)
		p.notify = make(chan struct{})
		p.mu.Unlock()
	}
	// A read error other than EOF is not expected; keep draining so the
	// child never blocks, then report EOF.
	_, _ = io.Copy(io.Discard, r)
	p.mu.Lock()
	p.eof = true
	close(p.notify)
	p.notify = make(chan struct{})
	p.mu.Unlock()
}

// output returns everything the process wrote so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		b.WriteString(l.raw)
		b.WriteByte('\n')
	}
	return b.String()
}

// findLog returns the first line that matches, and whether there is one.
func (p *proc) findLog(match func(logLine) bool) (logLine, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if match(l) {
			return l, true
		}
	}
	return logLine{}, false
}

// waitLog waits up to timeout for a line that matches. It fails the test
// when the output ends or the time runs out first.
func (p *proc) waitLog(what string, timeout time.Duration, match func(logLine) bool) logLine {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for i := 0; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if match(p.lines[i]) {
				l := p.lines[i]
				p.mu.Unlock()
				return l
			}
		}
		eof, ch := p.eof, p.notify
		p.mu.Unlock()
		if eof {
			p.t.Fatalf("the process's output ended without a log line %s", what)
		}
		select {
		case <-ch:
		case <-deadline.C:
			p.t.Fatalf("no log line %s within %s", what, timeout)
		}
	}
}

// at returns the time the process itself wrote on a JSON log line (slog's
// "time"): an ordering taken from the process's own clock, free of the
// harness's scheduling.
func (l logLine) at(t *testing.T) time.Time {
	t.Helper()
	s, _ := l.rec["time"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("log line without a time: %s", l.raw)
	}
	return at
}

// msgContains matches a JSON log line whose msg contains s.
func msgContains(s string) func(logLine) bool {
	return func(l logLine) bool { return strings.Contains(l.msg(), s) }
}

// listening waits for "lameduck: listening" and sets p.base from its addr.
func (p *proc) listening() {
	p.t.Helper()
	l := p.waitLog(`"lameduck: listening"`, startTimeout, func(l logLine) bool {
		return l.msg() == "lameduck: listening"
	})
	addr, _ := l.rec["addr"].(string)
	if addr == "" {
		p.t.Fatalf("listening line without addr: %s", l.raw)
	}
	p.base = "http://" + addr
}

// startDemo starts the demo on 127.0.0.1:0 and waits until it listens and
// /readyz answers 200 ok.
//
// Waiting for readiness matters: the product logs "lameduck: listening"
// before it installs its signal handler, so a SIGTERM sent on that line
// alone may kill the process outright (see the report on
// lifecycle.go's Run). Once /readyz is 200 the handler is installed.
func startDemo(t *testing.T, env map[string]string, args ...string) *proc {
	t.Helper()
	p := startProc(t, env, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	p.listening()
	p.waitServing(startTimeout)
	return p
}

// waitServing polls /readyz until it answers 200 ok; 503 starting is the
// only other answer allowed meanwhile.
func (p *proc) waitServing(timeout time.Duration) reply {
	p.t.Helper()
	return p.waitReadyz(timeout, http.StatusOK, "ok", http.StatusServiceUnavailable, "starting",
		"/readyz not 200 ok within %s")
}

// waitReadyz polls /readyz every pollEvery until it answers code and
// status, and returns that answer. The only other answer allowed meanwhile
// is wasCode and wasStatus; any other fails the test, and so does timeout
// passing first, with late (a format taking timeout) as the message.
func (p *proc) waitReadyz(timeout time.Duration, code int, status string, wasCode int, wasStatus, late string) reply {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := p.get("/readyz")
		switch {
		case r.code == code && r.status() == status:
			return r
		case r.code == wasCode && r.status() == wasStatus:
		default:
			p.t.Fatalf("GET /readyz = %s while waiting for %d %s", r, code, status)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf(late, timeout)
		}
		time.Sleep(pollEvery)
	}
}

// signal sends sig and returns the time just before it was sent: the
// process cannot have seen the signal earlier.
func (p *proc) signal(sig os.Signal) time.Time {
	p.t.Helper()
	at := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("send %v: %v", sig, err)
	}
	return at
}

// stopCleanly sends p SIGTERM and fails t unless p exits 0 within
// startTimeout; who names p in the failure ("the new worker").
func (p *proc) stopCleanly(t *testing.T, who string) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(startTimeout); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM; want 0", who, code)
	}
}

// waitExit waits up to timeout for the process to exit and returns its exit
// code and when cmd.Wait returned. It then waits for the end of the output,
// so that every line the process wrote can be searched.
func (p *proc) waitExit(timeout time.Duration) (code int, at time.Time) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("the process did not exit within %s", timeout)
	}
	select {
	case <-p.readerDone:
	case <-time.After(startTimeout):
		p.t.Fatalf("the process exited but its output did not end within %s", startTimeout)
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		p.t.Fatalf("wait: %v", p.waitErr)
	}
	return p.cmd.ProcessState.ExitCode(), p.exitAt
}

// hasExited reports whether the process has exited.
func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// reply is an HTTP answer, read in full.
type reply struct {
	code   int
	header http.Header
	raw    string
	body   map[string]any // the body as a JSON object; nil when it is not
	at     time.Time      // when the answer was read
}

func (r reply) status() string {
	s, _ := r.body["status"].(string)
	return s
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.code, strings.TrimSpace(r.raw)) }

// do sends a GET to path on c and reads the whole answer.
func (p *proc) do(ctx context.Context, c *http.Client, path string) (reply, error) {
	return p.doHeader(ctx, c, path, nil)
}

// doHeader is do with request headers.
func (p *proc) doHeader(ctx context.Context, c *http.Client, path string, hdr map[string]string) (reply, error) {
	a, err := testsupport.FetchContext(ctx, c, http.MethodGet, p.base+path, hdr)
	if err != nil {
		return reply{}, err
	}
	r := reply{code: a.Code, header: a.Header, raw: a.Body, at: time.Now()}
	var body map[string]any
	if json.Unmarshal([]byte(a.Body), &body) == nil {
		r.body = body
	}
	return r, nil
}

// get sends a GET to path with the process's client and fails on an error.
func (p *proc) get(path string) reply {
	p.t.Helper()
	r, err := p.do(context.Background(), p.client, path)
	if err != nil {
		p.t.Fatalf("GET %s: %v", path, err)
	}
	return r
}

// want fails the test unless GET path answers code with {"status":status}.
func (p *proc) want(path string, code int, status string) reply {
	p.t.Helper()
	r := p.get(path)
	if r.code != code || r.status() != status {
		p.t.Fatalf("GET %s = %s; want %d with \"status\":%q", path, r, code, status)
	}
	return r
}

// startRequest sends GET path on its own goroutine with ctx and returns once
// the request has been written to the socket; the answer (or error) arrives
// on the returned channel.
func (p *proc) startRequest(ctx context.Context, path string) <-chan result {
	p.t.Helper()
	wrote := make(chan error, 1)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			select { // a retried request may report twice
			case wrote <- i.Err:
			default:
			}
		},
	})
	out := make(chan result, 1)
	go func() {
		r, err := p.do(ctx, p.client, path)
		out <- result{r, err}
	}()
	select {
	case err := <-wrote:
		if err != nil {
			p.t.Fatalf("GET %s: writing the request: %v", path, err)
		}
	case res := <-out:
		p.t.Fatalf("GET %s answered before it was written: %v %v", path, res.reply, res.err)
	case <-time.After(reqTimeout):
		p.t.Fatalf("GET %s: not written within %s", path, reqTimeout)
	}
	return out
}

type result struct {
	reply
	err error
}

// awaitResult waits up to timeout for a request started by startRequest.
func awaitResult(t *testing.T, ch <-chan result, timeout time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(timeout):
		t.Fatalf("request not answered within %s", timeout)
		return result{}
	}
}

// waitDraining polls /readyz until it answers 503 draining, and returns that
// answer. Any answer other than 200 ok before it fails the test.
func (p *proc) waitDraining(timeout time.Duration) reply {
	p.t.Helper()
	return p.waitReadyz(timeout, http.StatusServiceUnavailable, "draining", http.StatusOK, "ok",
		"/readyz still 200 ok %s after the signal")
}

func env(kv ...string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// 1. A request in flight at SIGTERM is served; readiness flips at once,
// liveness does not; the process exits 0 after the window and within the
// budget. "At once" is an ordering: /readyz answered 503 draining before the
// process wrote its teardown line, inside a window of whole seconds.
func TestE2ESIGTERMDrainsInFlightRequest(t *testing.T) {
	t.Parallel()
	const delay, teardown = 2 * time.Second, 5 * time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "2s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	p.want("/readyz", 200, "ok")
	p.want("/healthz", 200, "ok")

	slow := p.startRequest(context.Background(), "/slow?d=1s")
	sig := p.signal(syscall.SIGTERM)

	r := p.waitDraining(5 * time.Second) // a bound on seeing the flip, not the window
	// Liveness on the same listener as /readyz, in the same phase.
	if h := p.want("/healthz", 200, "ok"); h.body["phase"] != "draining" {
		t.Errorf("GET /healthz = %s; want it answered 200 in phase draining", h)
	}

	res := awaitResult(t, slow, reqTimeout)
	if res.err != nil {
		t.Fatalf("the in-flight GET /slow?d=1s failed: %v", res.err)
	}
	if res.code != 200 || res.body["slept"] != "1s" {
		t.Fatalf("the in-flight GET /slow?d=1s = %s; want 200 {\"slept\":\"1s\"}", res.reply)
	}

	code, at := p.waitExit(delay + teardown + 5*time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	drained := p.waitLog(`"lameduck: draining"`, time.Second, msgContains("lameduck: draining")).at(t)
	torn := p.waitLog(`"lameduck: teardown"`, time.Second, msgContains("lameduck: teardown")).at(t)
	if !r.at.Before(torn) {
		t.Errorf("/readyz first answered 503 draining at %s, after the teardown began at %s; want it during the window",
			r.at.Format(time.StampMicro), torn.Format(time.StampMicro))
	}
	if w := torn.Sub(drained); w < delay-logSkew {
		t.Errorf("the process's own log puts the teardown %s after the draining line; want the whole %s window", w, delay)
	}
	if after := at.Sub(sig); after < delay {
		t.Errorf("exited %s after SIGTERM, before the %s window had passed", after, delay)
	}
}

// 2. Throughout the window, new connections are accepted and served; the
// listener refuses connections only once the window has passed. The window
// is 3s, about sixty request intervals: a stalled second or two of this
// process still leaves a stream of requests inside it.
func TestE2ENewConnectionsServedThroughWindow(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "3s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))

	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: reqTimeout}

	var before, inWindow, after int
	sig, refused := p.requestUntilRefused(4, delay, delay+10*time.Second, func(sig time.Time) (time.Time, bool) {
		sent := time.Now()
		r, err := p.do(context.Background(), c, "/")
		now := time.Now()
		switch {
		case err == nil && r.code == 200:
			switch {
			case sig.IsZero():
				before++
			case now.Before(sig.Add(delay)):
				inWindow++
			default:
				after++
			}
		case err == nil:
			t.Fatalf("GET / sent %s after SIGTERM = %s; want 200", sent.Sub(sig), r)
		case sig.IsZero() || now.Before(sig.Add(delay)):
			t.Fatalf("GET / on a new connection failed %s after SIGTERM, inside the %s window: %v",
				now.Sub(sig), delay, err)
		case isRefused(err):
			return now, true
		default:
			// A connection caught in the listener's backlog as it closed
			// may be reset; that can only happen after the window.
			t.Logf("GET / %s after SIGTERM (after the window): %v", now.Sub(sig), err)
		}
		return now, false
	})
	t.Logf("200s: %d before SIGTERM, %d in the window, %d after it; first refusal %s after SIGTERM",
		before, inWindow, after, refused.Sub(sig))
	if inWindow < 5 {
		t.Errorf("only %d requests answered inside the window; want a steady stream (about 60)", inWindow)
	}
	if code, _ := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

// requestUntilRefused calls request every 50ms, sends SIGTERM before the
// call numbered sigAt (from 0), and stops at the first call that reports a
// refused connection. request gets SIGTERM's time (zero before it) and
// returns when its request ended and whether the connection was refused.
// The test fails when connections are still accepted giveUp after SIGTERM,
// and when the first refusal came less than the window delay after it.
// It returns SIGTERM's time and the first refusal's.
func (p *proc) requestUntilRefused(sigAt int, delay, giveUp time.Duration, request func(sig time.Time) (now time.Time, refused bool)) (sig, refusedAt time.Time) {
	p.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		if i == sigAt {
			sig = p.signal(syscall.SIGTERM)
		}
		now, refused := request(sig)
		if refused {
			refusedAt = now
			break
		}
		if !sig.IsZero() && now.After(sig.Add(giveUp)) {
			p.t.Fatalf("connections still accepted %s after SIGTERM", now.Sub(sig))
		}
		<-tick.C
	}
	if refusedAt.Before(sig.Add(delay)) {
		p.t.Errorf("first refused connection %s after SIGTERM; want no earlier than the %s window", refusedAt.Sub(sig), delay)
	}
	return sig, refusedAt
}

// 3. With a zero window and nothing in flight, SIGTERM stops the process at
// once (the laptop case), still through the sequence. Measured on the
// process's own log (draining line to stopped line), with a bound far below
// any window a default would give (5s) and above a stalled second.
func TestE2EZeroDelayExitsAtOnce(t *testing.T) {
	t.Parallel()
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "0s"))
	if r := p.get("/"); r.code != 200 {
		t.Fatalf("GET / = %s", r)
	}
	p.client.CloseIdleConnections()

	p.signal(syscall.SIGTERM)
	code, _ := p.waitExit(10 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	drained := p.waitLog(`"lameduck: draining"`, time.Second, msgContains("lameduck: draining")).at(t)
	stopped := p.waitLog(`"lameduck: stopped"`, time.Second, msgContains("lameduck: stopped")).at(t)
	if took := stopped.Sub(drained); took >= 2*time.Second {
		t.Errorf("the process logged stopped %s after draining; want at once (no window)", took)
	}
}

// 4. A request that outlives the teardown budget is cut: the process exits
// non-zero at the budget and the log names the request.
func TestE2ETeardownBudgetCutsLongRequest(t *testing.T) {
	t.Parallel()
	const delay, teardown = 200 * time.Millisecond, time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "200ms", "LAMEDUCK_SHUTDOWN_TEARDOWN", "1s"))

	slow := p.startRequest(context.Background(), "/slow?d=1m")
	sig := p.signal(syscall.SIGTERM)

	code, at := p.waitExit(delay + teardown + 10*time.Second)
	if code == 0 {
		t.Fatalf("exit code 0; want non-zero after cutting a request")
	}
	windowEnd := sig.Add(delay)
	if took := at.Sub(windowEnd); took >= teardown+3*time.Second {
		t.Errorf("exited %s after the window; want at the %s teardown budget", took, teardown)
	}
	// The HTTP drain may give part of the teardown budget to the background
	// join, but it keeps at least half of it (teardown.go): a request cut
	// sooner was cut early.
	if at.Before(windowEnd.Add(teardown / 2)) {
		t.Errorf("exited %s after SIGTERM, before delay + teardown/2 = %s: the request was cut early",
			at.Sub(sig), delay+teardown/2)
	}
	if _, ok := p.findLog(msgContains("GET /slow")); !ok {
		t.Errorf("no log line names the cut request \"GET /slow\"")
	}
	if res := awaitResult(t, slow, reqTimeout); res.err == nil && res.code == 200 {
		t.Errorf("the cut GET /slow?d=1m got %s; want its connection closed", res.reply)
	}
}

// 5. A second SIGTERM during the window is logged and changes nothing.
func TestE2ESecondSIGTERMDoesNotShortenWindow(t *testing.T) {
	t.Parallel()
	const delay = time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))

	first := p.signal(syscall.SIGTERM)
	p.waitDraining(5 * time.Second)
	// The schedule of the test, not a synchronisation: the second signal
	// comes about 300ms into the window.
	time.Sleep(time.Until(first.Add(300 * time.Millisecond)))
	if p.hasExited() {
		t.Fatalf("the process exited %s after the first SIGTERM, inside the %s window", p.exitAt.Sub(first), delay)
	}
	second := p.signal(syscall.SIGTERM)

	code, at := p.waitExit(delay + 15*time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	if at.Sub(first) < delay {
		t.Errorf("exited %s after the first SIGTERM (second at %s); want no earlier than the %s window",
			at.Sub(first), second.Sub(first), delay)
	}
}

// 6. A bad duration ends the process non-zero before it binds, and the
// output names the variable and its value.
//
// The port is held by the test (bound with SO_REUSEPORT, never listening)
// for the whole case, so no other process can take it, and a process that
// tried to bind it would fail loudly ("lameduck: listen on ...: address
// already in use"): the process must exit on the bad value without such an
// attempt.
func TestE2EInvalidDurationsFailBeforeListening(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, value string }{
		{"LAMEDUCK_SHUTDOWN_DELAY", "5"},
		{"LAMEDUCK_SHUTDOWN_DELAY", "-1s"},
		{"LAMEDUCK_SHUTDOWN_TEARDOWN", "0s"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(testsupport.HoldPort(t, 0)))
			p := startProc(t, env(tc.name, tc.value), "--addr", addr)
			code, _ := p.waitExit(startTimeout)

			if code == 0 {
				t.Errorf("exit code 0; want non-zero")
			}
			if l, ok := p.findLog(func(l logLine) bool {
				return l.msg() == "lameduck: listening" || strings.Contains(l.msg(), "lameduck: listen on")
			}); ok {
				t.Errorf("the process got as far as binding: %s", l.raw)
			}
			if out := p.output(); strings.Contains(out, "address already in use") {
				t.Errorf("the process tried to bind %s:\n%s", addr, out)
			}
			if !strings.Contains(p.output(), tc.name) {
				t.Fatalf("the output does not name %s", tc.name)
			}
			quoted, bare := fmt.Sprintf("%s=%q", tc.name, tc.value), tc.name+"="+tc.value
			if _, ok := p.findLog(func(l logLine) bool {
				for _, m := range l.messages() {
					if strings.Contains(m, quoted) || strings.Contains(m, bare) {
						return true
					}
				}
				return false
			}); !ok {
				t.Errorf("no log line says %s (the variable and its value)", quoted)
			}
		})
	}
}

// 7. During startup work, liveness passes while startup and readiness say
// starting; both pass once the work is done.
func TestE2EStartupDelay(t *testing.T) {
	t.Parallel()
	const startup = time.Second
	p := startProc(t, nil, "--addr", "127.0.0.1:0", "--startup-delay", "1s")
	p.listening()

	p.want("/healthz", 200, "ok")
	p.want("/startupz", 503, "starting")
	p.want("/readyz", 503, "starting")

	deadline := time.Now().Add(startup + 15*time.Second)
	var startupOK, readyOK time.Time
	for startupOK.IsZero() || readyOK.IsZero() {
		for _, probe := range []struct {
			path string
			ok   *time.Time
		}{{"/startupz", &startupOK}, {"/readyz", &readyOK}} {
			r := p.get(probe.path)
			switch {
			case r.code == 200 && r.status() == "ok":
				if probe.ok.IsZero() {
					*probe.ok = r.at
				}
			case r.code == 503 && r.status() == "starting":
				if !probe.ok.IsZero() {
					t.Fatalf("GET %s went back to %s after 200 ok", probe.path, r)
				}
			default:
				t.Fatalf("GET %s = %s during startup", probe.path, r)
			}
		}
		if h := p.get("/healthz"); h.code != 200 {
			t.Fatalf("GET /healthz = %s during startup", h)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/startupz and /readyz not 200 within %s of the start", time.Since(p.started))
		}
		time.Sleep(pollEvery)
	}
	for name, at := range map[string]time.Time{"/startupz": startupOK, "/readyz": readyOK} {
		if at.Sub(p.started) < startup {
			t.Errorf("%s answered 200 %s after the process started; want no earlier than the %s startup delay",
				name, at.Sub(p.started), startup)
		}
	}

	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

// 8. GET /prestop runs the window (readiness already 503) and answers when it
// has passed; the SIGTERM that follows adds no second window: the process
// logs stopped well within a window of the line saying it got the SIGTERM
// (both times from the process's own log; the 4s window leaves seconds of
// margin for the test's release of its held request in between).
func TestE2EPreStopHookThenSIGTERM(t *testing.T) {
	t.Parallel()
	const delay = 4 * time.Second
	p := startDemo(t, env("LAMEDUCK_PRESTOP", "true", "LAMEDUCK_PRESTOP_TOKEN", "e2e-token",
		"LAMEDUCK_SHUTDOWN_DELAY", "4s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "10s"))

	// A request held open by the test keeps the process in teardown until
	// the test lets go, so that the SIGTERM after the hook reaches a live
	// process, as the kubelet's does.
	holdCtx, release := context.WithCancel(context.Background())
	defer release()
	hold := p.startRequest(holdCtx, "/slow?d=1m")

	sent := time.Now()
	prestop := make(chan result, 1)
	go func() {
		r, err := p.doHeader(context.Background(), p.client, "/prestop", map[string]string{"X-Lameduck-Token": "e2e-token"})
		prestop <- result{r, err}
	}()

	p.waitDraining(5 * time.Second)
	select {
	case res := <-prestop:
		t.Fatalf("GET /prestop returned %s after %s, before the %s window passed (err %v)",
			res.reply, res.at.Sub(sent), delay, res.err)
	default:
	}
	if h := p.want("/healthz", 200, "ok"); h.body["phase"] != "draining" {
		t.Fatalf("GET /healthz = %s; want it answered 200 in phase draining, during the preStop window", h)
	}

	res := awaitResult(t, prestop, delay+reqTimeout)
	if res.err != nil {
		t.Fatalf("GET /prestop: %v", res.err)
	}
	if res.code != 200 {
		t.Fatalf("GET /prestop = %s; want 200", res.reply)
	}
	if took := res.at.Sub(sent); took < delay {
		t.Errorf("GET /prestop returned after %s; want it held for the %s window", took, delay)
	}

	p.signal(syscall.SIGTERM)
	sigLine := p.waitLog(`"after the preStop hook"`, 5*time.Second, msgContains("after the preStop hook"))
	if l, ok := p.findLog(msgContains("ignored")); ok {
		t.Errorf("the kubelet's SIGTERM after the hook was treated as a second signal: %s", l.raw)
	}
	release() // the held request leaves; teardown can finish

	code, _ := p.waitExit(15 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	stopped := p.waitLog(`"lameduck: stopped"`, time.Second, msgContains("lameduck: stopped"))
	if took := stopped.at(t).Sub(sigLine.at(t)); took >= delay {
		t.Errorf("the process logged stopped %s after the SIGTERM; want well before a second %s window", took, delay)
	}
	if res := awaitResult(t, hold, reqTimeout); res.err == nil {
		t.Errorf("the held request got an answer: %s", res.reply)
	}
}

// 9. With LAMEDUCK_EXIT_ON_SECOND_SIGNAL=true, a second Ctrl-C during the
// window exits at once with 128 + SIGINT.
func TestE2ESecondSIGINTExitsWhenEnabled(t *testing.T) {
	t.Parallel()
	const delay = 10 * time.Second
	p := startDemo(t, env("LAMEDUCK_EXIT_ON_SECOND_SIGNAL", "true",
		"LAMEDUCK_SHUTDOWN_DELAY", "10s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))

	first := p.signal(os.Interrupt)
	p.waitDraining(5 * time.Second)
	if p.hasExited() {
		t.Fatalf("the process exited after the first SIGINT")
	}

	second := p.signal(os.Interrupt)
	code, at := p.waitExit(delay + 15*time.Second)
	if code != 130 {
		t.Fatalf("exit code %d; want 130 (128 + SIGINT)", code)
	}
	// At once: a process that waited for the window would exit about 10s
	// after the first signal; 5s leaves whole seconds for this process to
	// see the exit.
	if took := at.Sub(second); took >= 5*time.Second {
		t.Errorf("exited %s after the second SIGINT (%s into the %s window); want at once", took, second.Sub(first), delay)
	}
}

// 10. GET /slow rejects a missing, malformed or excessive d with a 400 and a
// JSON reason.
func TestE2ESlowRejectsBadDurations(t *testing.T) {
	t.Parallel()
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "0s"))
	for _, tc := range []struct{ path, mention string }{
		{"/slow", "missing d"},
		{"/slow?d=abc", `"abc"`},
		{"/slow?d=11m", `"11m"`},
	} {
		r := p.get(tc.path)
		if r.code != http.StatusBadRequest {
			t.Errorf("GET %s = %s; want 400", tc.path, r)
			continue
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: Content-Type %q; want application/json", tc.path, ct)
		}
		msg, _ := r.body["error"].(string)
		if msg == "" {
			t.Errorf("GET %s = %s; want a JSON body with an \"error\" reason", tc.path, r)
		} else if !strings.Contains(msg, tc.mention) {
			t.Errorf("GET %s: reason %q does not mention %s", tc.path, msg, tc.mention)
		}
	}
	if r := p.get("/slow?d=1ms"); r.code != 200 {
		t.Errorf("GET /slow?d=1ms = %s; want 200", r)
	}
	p.signal(syscall.SIGTERM)
	if code, _ := p.waitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

// docs/probes-and-shutdown.md, Configuration: "A bad value stops New before
// anything is bound, with exit 1 … as one record whose errors member is an
// array with --log-format json"; the README: "an unknown LAMEDUCK_* name
// ends the process with exit code 1 before it listens". Exit 1 exactly, not
// any non-zero code, and every problem in the one record.
func TestE2EBadSettingsExitOneBeforeListening(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"unknown name", env("LAMEDUCK_SHUTDOWN_DELAYS", "5s"), []string{`LAMEDUCK_SHUTDOWN_DELAYS="5s": not a lameduck setting`}},
		{"unknown name, empty", env("LAMEDUCK_SHUTDOWN_DELAYS", ""), []string{`LAMEDUCK_SHUTDOWN_DELAYS="": not a lameduck setting`}},
		{"two problems", env("LAMEDUCK_SHUTDOWN_DELAY", "5", "LAMEDUCK_DRAIN_MODE", "fast"),
			[]string{`LAMEDUCK_SHUTDOWN_DELAY="5": a duration needs a unit`, `LAMEDUCK_DRAIN_MODE="fast": not one of the choices`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startProc(t, tc.env, "--addr", "127.0.0.1:0")
			code, _ := p.waitExit(startTimeout)
			if code != 1 {
				t.Fatalf("exit code %d; want 1\n%s", code, p.output())
			}
			if l, ok := p.findLog(func(l logLine) bool {
				return l.msg() == "lameduck: listening" || strings.Contains(l.msg(), "lameduck: listen on")
			}); ok {
				t.Fatalf("the process got as far as binding: %s", l.raw)
			}
			var errs []logLine
			p.findLog(func(l logLine) bool {
				if l.rec["level"] == "ERROR" {
					errs = append(errs, l)
				}
				return false
			})
			if len(errs) != 1 {
				t.Fatalf("%d ERROR lines; want one:\n%s", len(errs), p.output())
			}
			text := strings.Join(errs[0].messages(), "\n")
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("the ERROR line lacks %q: %s", w, errs[0].raw)
				}
			}
		})
	}
}

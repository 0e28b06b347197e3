package lameduck_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// env returns a LookupEnv reading only from m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

type harness struct {
	t     *testing.T
	lc    *lameduck.Lifecycle
	clock *lameducktest.Clock
	logs  *testsupport.LogBuffer
	done  chan error
}

// newHarness returns a Lifecycle on a fake clock, reading no environment and
// no signals, with cfg's explicit fields kept. Its log goes to h.logs, as
// text, unless cfg sets a Logger.
func newHarness(t *testing.T, cfg lameduck.Config) *harness {
	t.Helper()
	h := &harness{t: t, clock: lameducktest.NewClock(epoch)}
	cfg.Clock = h.clock
	h.lc, h.logs = newLifecycle(t, cfg)
	return h
}

// newLifecycle returns a Lifecycle reading no signals and, unless cfg sets
// LookupEnv, no environment, with cfg's explicit fields kept: on the real
// clock (the bubble's, in a synctest test) unless cfg sets a Clock. Its log
// goes to the returned buffer, as text, unless cfg sets a Logger, and is
// printed if the test fails.
func newLifecycle(t *testing.T, cfg lameduck.Config) (*lameduck.Lifecycle, *testsupport.LogBuffer) {
	t.Helper()
	logs := &testsupport.LogBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = env(nil)
	}
	cfg.IgnoreSignals = true
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	logs.LogOnFailure(t)
	return lc, logs
}

// serve registers a loopback server for handler and returns its base URL.
func (h *harness) serve(handler http.Handler) string {
	h.t.Helper()
	base, _ := h.serveNotified(handler)
	return base
}

// serveNotified is serve, and returns a channel closed when the teardown
// calls the server's Shutdown. By then the HTTP drain has closed the
// listeners and ended its accept grace (whose timer lives only a moment when
// no connection is silent), so the one timer it keeps on the fake clock is
// its deadline: a test that waits for this can assert exactly that nothing
// fires before that deadline.
func (h *harness) serveNotified(handler http.Handler) (base string, shutdown <-chan struct{}) {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	shut := make(chan struct{})
	srv.RegisterOnShutdown(sync.OnceFunc(func() { close(shut) }))
	if err := h.lc.AddServer(srv, ln); err != nil {
		h.t.Fatal(err)
	}
	return "http://" + ln.Addr().String(), shut
}

// probeListener returns the address of the Lifecycle's own probe
// listener, from its "lameduck: listening" line (Run logs it before
// StartupDone fires). Tests set Config.ProbeAddr to "127.0.0.1:0" and read
// the port here: an address picked by listening and closing first is a
// freed port, which another test binary running beside this one may bind
// before the Lifecycle does.
func (h *harness) probeListener() string {
	h.t.Helper()
	for line := range strings.Lines(h.logs.String()) {
		line = strings.TrimSpace(line)
		if !strings.Contains(line, `msg="lameduck: listening"`) || !strings.HasSuffix(line, " probes=true") {
			continue
		}
		if _, rest, ok := strings.Cut(line, " addr="); ok {
			addr, _, _ := strings.Cut(rest, " ")
			return addr
		}
	}
	h.t.Fatalf("no listening line for the probe listener:\n%s", h.logs)
	return ""
}

// closeNotifier is a listener that says when it is closed.
type closeNotifier struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func notifyClose(ln net.Listener) *closeNotifier {
	return &closeNotifier{Listener: ln, closed: make(chan struct{})}
}

func (l *closeNotifier) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

// run starts Run and returns at once; wait collects its result.
func (h *harness) run() {
	h.done = make(chan error, 1)
	go func() { h.done <- h.lc.Run(context.Background()) }()
}

// start runs the Lifecycle and returns once StartupDone has fired (await
// fails t if it never does).
func (h *harness) start(t *testing.T) {
	t.Helper()
	h.run()
	await(t, h.lc.Events().StartupDone)
}

// waitOK waits for Run, as wait does, and fails t unless it returned nil.
func (h *harness) waitOK(t *testing.T) {
	t.Helper()
	if err := h.wait(); err != nil {
		t.Fatal(err)
	}
}

// wait returns Run's result, or fails the test after testsupport.Guard of
// real time (a hang guard) when Run has not returned.
func (h *harness) wait() error {
	h.t.Helper()
	return testsupport.Recv(h.t, h.done, "Run to return")
}

// await blocks until ev fires, or fails the test after testsupport.Guard of
// real time (a hang guard, not a synchronisation).
func await(t *testing.T, ev *lameduck.Event) {
	t.Helper()
	testsupport.Await(t, ev)
}

// recv receives from ch, or fails the test after testsupport.Guard of real
// time (a hang guard, not a synchronisation): a test whose code under test
// never sends fails naming what it waited for, instead of deadlocking until
// the test binary's timeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return testsupport.Recv(t, ch, what)
}

// timers waits until the fake clock has n pending timers.
func (h *harness) timers(n int) {
	h.t.Helper()
	testsupport.Timers(h.t, h.clock, n)
}

type probe struct {
	code int
	body string
}

func get(t *testing.T, c *http.Client, url string) probe {
	t.Helper()
	p, err := tryGet(c, url)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tryGet is get for a goroutine other than the test's, where t.Fatal must
// not be called: it returns the error for the test goroutine to report.
func tryGet(c *http.Client, url string) (probe, error) {
	resp, err := c.Get(url)
	if err != nil {
		return probe{}, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return probe{resp.StatusCode, string(b)}, nil
}

// reply is what a goroutine's request got, for the test goroutine to check.
type reply struct {
	probe
	err error
}

// getAsync sends GET url from a goroutine of its own, and its outcome on
// the returned channel (receive it with recv).
func getAsync(c *http.Client, url string) <-chan reply {
	ch := make(chan reply, 1)
	go func() {
		p, err := tryGet(c, url)
		ch <- reply{p, err}
	}()
	return ch
}

// sendAsync sends a bodiless request from a goroutine of its own and its
// error, nil once a response has come (its body closed unread), on the
// returned channel (receive it with recv).
func sendAsync(c *http.Client, method, url string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		req, err := http.NewRequest(method, url, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = c.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		ch <- err
	}()
	return ch
}

func (p probe) status(t *testing.T, code int, word string) {
	t.Helper()
	if p.code != code || !strings.Contains(p.body, `"status":"`+word+`"`) {
		t.Fatalf("got %d %s; want %d status %q", p.code, p.body, code, word)
	}
}

func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// windowWaiting waits until the lame-duck window is waiting on a timer, and
// reports false, or has ended, and reports true.
func (h *harness) windowWaiting() (ended bool) {
	h.t.Helper()
	ev := h.lc.Events().WindowEnded
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-ev.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.clock.WaitForTimers(ctx, 1)
	if ev.Fired() {
		return true
	}
	if err != nil {
		h.t.Fatalf("the window neither waits nor ends: %v", err)
	}
	return false
}

// advanceUntilWindowEnds runs each (when not nil) and advances the clock by
// step, every time the window waits on a timer, until the window ends. It
// fails the test once limit has passed on the fake clock without the end:
// a window that never ended would otherwise loop for ever.
func (h *harness) advanceUntilWindowEnds(step, limit time.Duration, each func()) {
	h.t.Helper()
	for passed := time.Duration(0); !h.windowWaiting(); passed += step {
		if passed >= limit {
			h.t.Fatalf("the window has not ended %s after the test began advancing the clock", limit)
		}
		if each != nil {
			each()
		}
		h.clock.Advance(step)
	}
}

// elapsed is how long passed, on the Lifecycle's clock, from the moment
// from fired to the moment to fired; to must have fired.
func elapsed(t *testing.T, from, to *lameduck.Event) time.Duration {
	t.Helper()
	s, _ := from.At()
	e, ok := to.At()
	if !ok {
		t.Fatalf("%s has not fired", to.Name())
	}
	return e.Sub(s)
}

// windowLength is how long lc's lame-duck window lasted, on its clock: from
// ShutdownInitiated to WindowEnded, which must have fired.
func windowLength(t *testing.T, lc *lameduck.Lifecycle) time.Duration {
	t.Helper()
	return elapsed(t, lc.Events().ShutdownInitiated, lc.Events().WindowEnded)
}

// sequenceLength is how long lc's shutdown sequence lasted, on its clock:
// from ShutdownInitiated to Stopped, which must have fired.
func sequenceLength(t *testing.T, lc *lameduck.Lifecycle) time.Duration {
	t.Helper()
	return elapsed(t, lc.Events().ShutdownInitiated, lc.Events().Stopped)
}

// logged fails t, saying what and showing the log, unless h's log holds s.
func (h *harness) logged(t *testing.T, s, what string) {
	t.Helper()
	if !strings.Contains(h.logs.String(), s) {
		t.Fatalf("%s:\n%s", what, h.logs)
	}
}

// cutAtBudget advances the fake clock, on which the HTTP drain's deadline
// is the only timer left, through the drain's budget: nothing may end the
// drain a nanosecond before it; at it Run fails with an error wrapping
// context.DeadlineExceeded, and the request whose end reqDone reports has
// been cut, not answered.
func (h *harness) cutAtBudget(t *testing.T, budget time.Duration, reqDone <-chan error) {
	t.Helper()
	if n := h.clock.Advance(budget - time.Nanosecond); n != 0 || h.lc.Events().HTTPDrained.Fired() {
		t.Fatalf("the drain ended before its budget was spent (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	if err := h.wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if err := recv(t, reqDone, "the cut request's end"); err == nil {
		t.Fatal("the stuck request was answered; it should have been cut")
	}
}

// startupUntilCancelled registers a startup task named name that runs
// until its context is cancelled, and returns a channel closed when the
// task has started: the Lifecycle stays starting until the sequence begins.
func (h *harness) startupUntilCancelled(name string) <-chan struct{} {
	h.t.Helper()
	started := make(chan struct{})
	if err := h.lc.AddStartupTask(name, func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}); err != nil {
		h.t.Fatal(err)
	}
	return started
}

// addFakeServer registers on lc a server that accepts on an in-memory
// listener and serves nothing: Run binds a listener, so the probes count
// as served (the log may speak of /readyz), with no socket, inside a
// synctest bubble too.
func addFakeServer(t *testing.T, lc *lameduck.Lifecycle) {
	t.Helper()
	if err := lc.AddServerFuncs(testsupport.SlowServer(0), testsupport.NewChanListener()); err != nil {
		t.Fatal(err)
	}
}

// dial opens a raw TCP connection to base ("http://host:port"), closed
// when the test ends.
func dial(t *testing.T, base string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dialUpgrade dials base and asks GET /ws to upgrade to x-test, as a
// WebSocket client would; upgrade answers it.
func dialUpgrade(t *testing.T, base string) net.Conn {
	t.Helper()
	conn := dial(t, base)
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\n")
	return conn
}

// upgrade hijacks w's connection and answers 101 Switching Protocols to
// x-test, as a WebSocket handler would. It returns nil, having marked t
// failed, when the connection cannot be hijacked.
func upgrade(t *testing.T, w http.ResponseWriter) net.Conn {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Error(err)
		return nil
	}
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x-test\r\nConnection: Upgrade\r\n\r\n")
	buf.Flush()
	return conn
}

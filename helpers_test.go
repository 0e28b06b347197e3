package lameduck_test

import (
	"context"
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
	h := &harness{t: t, clock: lameducktest.NewClock(epoch), logs: &testsupport.LogBuffer{}}
	cfg.Clock = h.clock
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = env(nil)
	}
	cfg.IgnoreSignals = true
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.lc = lc
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", h.logs)
		}
	})
	return h
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

func (h *harness) wait() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return")
		return nil
	}
}

// await blocks until ev fires, or fails the test after 10s of real time (a
// hang guard, not a synchronisation).
func await(t *testing.T, ev *lameduck.Event) {
	t.Helper()
	select {
	case <-ev.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("event %s never fired", ev.Name())
	}
}

// recv receives from ch, or fails the test after 10s of real time (a hang
// guard, not a synchronisation): a test whose code under test never sends
// fails naming what it waited for, instead of deadlocking until the test
// binary's timeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
		var zero T
		return zero
	}
}

// timers waits until the fake clock has n pending timers.
func (h *harness) timers(n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.clock.WaitForTimers(ctx, n); err != nil {
		h.t.Fatalf("waiting for %d timers (have %d): %v", n, h.clock.Pending(), err)
	}
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

// addFakeServer registers on lc a server that accepts on an in-memory
// listener and serves nothing: Run binds a listener, so the probes count
// as served (the log may speak of /readyz), with no socket, inside a
// synctest bubble too.
func addFakeServer(t *testing.T, lc *lameduck.Lifecycle) {
	t.Helper()
	err := lc.AddServerFuncs(lameduck.ServerFuncs{
		Name: "fake",
		Serve: func(ln net.Listener) error {
			for {
				if _, err := ln.Accept(); err != nil {
					return err
				}
			}
		},
		Shutdown: func(context.Context) error { return nil },
	}, newChanListener())
	if err != nil {
		t.Fatal(err)
	}
}

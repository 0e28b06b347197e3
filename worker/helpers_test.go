package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"github.com/lameduck/lameduck/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// guard bounds every wait on the worker's goroutines: a hang fails the test
// instead of timing the suite out; it is never a synchronisation.
const guard = testsupport.Guard

// fakeSource hands out what the test sends: a job on jobs, or an idle cycle
// on idle. A fetch nobody answers blocks until the queue's request expires,
// which the harness makes happen at the drain (expireAll): the runner never
// cancels a fetch, it waits for it (worker.Source).
type fakeSource struct {
	jobs    chan worker.Job
	idle    chan struct{}
	fetches chan struct{} // receives one value as each fetch begins
	expired chan struct{} // closed by expireAll: every fetch from then on is answered idle
	once    sync.Once
	// silent and fail, nil but in a silentSource, end the fetch under way
	// in silence (an error wrapping worker.ErrNoReply) or with an error.
	silent, fail chan struct{}
}

func newSource() *fakeSource {
	return &fakeSource{jobs: make(chan worker.Job), idle: make(chan struct{}), fetches: make(chan struct{}, 100), expired: make(chan struct{})}
}

func (s *fakeSource) Fetch(ctx context.Context, _ time.Duration) (worker.Job, error) {
	select {
	case <-s.expired: // answered at once, uncounted: the loop may ask again before it sees the drain
		return nil, nil
	default:
	}
	s.fetches <- struct{}{}
	select {
	case j := <-s.jobs:
		return j, nil
	case <-s.idle:
		return nil, nil
	case <-s.silent:
		return nil, fmt.Errorf("%w: no heartbeat within 2s", worker.ErrNoReply)
	case <-s.fail:
		return nil, errors.New("connection refused")
	case <-s.expired:
		return nil, nil
	case <-ctx.Done():
		return nil, nil
	}
}

// expireAll ends the fetch under way, and every later one, with no job, as
// a queue's request expiry would.
func (s *fakeSource) expireAll() { s.once.Do(func() { close(s.expired) }) }

// expirer is a test source whose fetches the harness ends at the drain.
type expirer interface{ expireAll() }

// addLoop adds l to the worker; a test source in it is expired when the
// shutdown sequence begins (see fakeSource).
func (h *harness) addLoop(l worker.Loop) error {
	if e, ok := l.Source.(expirer); ok {
		h.expirers = append(h.expirers, e)
	}
	return h.w.AddLoop(l)
}

// send hands v over on ch, failing the test after guard if nothing takes
// it (a hang guard, not a synchronisation): a loop that stopped fetching,
// or a handler that never started, fails the test naming what it waited
// for instead of deadlocking it.
func send[T any](t *testing.T, ch chan<- T, v T, what string) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(guard):
		t.Fatalf("waited %s for the worker to take %s", guard, what)
	}
}

// deliver answers the fetch under way with j.
func (s *fakeSource) deliver(t *testing.T, j worker.Job) {
	t.Helper()
	send(t, s.jobs, j, "job "+j.ID()+" from a fetch")
}

// idleCycle answers the fetch under way with nothing: one idle cycle.
func (s *fakeSource) idleCycle(t *testing.T) {
	t.Helper()
	send(t, s.idle, struct{}{}, "an idle cycle from a fetch")
}

// idleUntil answers fetches with idle cycles until ev happens, whichever
// loop asks: loops sharing s race for each answer, and one loop may take
// two before another has parked on its fetch, so a fixed count of cycles
// would not give every loop one. It takes the fetches' signals as they
// come (the loops cycle fast, and s.fetches holds only 100), so a test
// calls awaitFetch after it only for a fetch begun later.
func (s *fakeSource) idleUntil(t *testing.T, ev *lameduck.Event) {
	t.Helper()
	timeout := time.After(guard)
	for {
		select {
		case s.idle <- struct{}{}:
		case <-s.fetches:
		case <-ev.Done():
			return
		case <-timeout:
			t.Fatalf("waited %s for event %s while answering idle cycles", guard, ev.Name())
		}
	}
}

// fakeJob records how it ended.
type fakeJob struct {
	id    string
	ended chan string // "ack" or "back <delay>"
}

func newJob(id string) *fakeJob { return &fakeJob{id: id, ended: make(chan string, 1)} }

func (j *fakeJob) ID() string                { return j.id }
func (j *fakeJob) Ack(context.Context) error { j.ended <- "ack"; return nil }
func (j *fakeJob) HandBack(_ context.Context, d time.Duration) error {
	j.ended <- "back " + d.String()
	return nil
}

func (j *fakeJob) outcome(t *testing.T) string {
	t.Helper()
	return testsupport.Recv(t, j.ended, "job "+j.id+" to be acknowledged or handed back")
}

// wantHandedBackAtOnce fails t unless j ends handed back with no delay
// (HandBack with 0).
func (j *fakeJob) wantHandedBackAtOnce(t *testing.T) {
	t.Helper()
	if got := j.outcome(t); got != "back 0s" {
		t.Fatalf("job %q ended %q; want handed back at once", j.id, got)
	}
}

// handler runs each job until the test releases it or its context ends,
// and reports each start.
type handler struct {
	started chan context.Context
	release chan error
	calls   sync.Map // job id → number of runs
}

func newHandler() *handler {
	return &handler{started: make(chan context.Context, 10), release: make(chan error)}
}

func (h *handler) Handle(ctx context.Context, j worker.Job) error {
	n, _ := h.calls.LoadOrStore(j.ID(), new(int))
	*n.(*int)++
	h.started <- ctx
	select {
	case err := <-h.release:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// finish ends the job running in Handle with err.
func (h *handler) finish(t *testing.T, err error) {
	t.Helper()
	send(t, h.release, err, "the running job's end")
}

func (h *handler) awaitStart(t *testing.T) context.Context {
	t.Helper()
	return testsupport.Recv(t, h.started, "the job to start")
}

// startJob answers src's fetch under way with a new job id and waits until
// hd runs it; it returns the job and the context Handle was given.
func startJob(t *testing.T, src *fakeSource, hd *handler, id string) (*fakeJob, context.Context) {
	t.Helper()
	j := newJob(id)
	src.deliver(t, j)
	return j, hd.awaitStart(t)
}

type harness struct {
	expirers []expirer     // sources expired at the drain
	returned chan struct{} // closed when Run has returned
	poll     time.Duration
	t        *testing.T
	w        *worker.Worker
	clock    *lameducktest.Clock
	logs     *testsupport.LogBuffer
	done     chan error
}

var start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newHarness returns a worker on a fake clock, reading vars as its
// environment, with its probes on a loopback port of the system's choice.
func newHarness(t *testing.T, cfg worker.Config, vars map[string]string) *harness {
	t.Helper()
	h := &harness{t: t, clock: lameducktest.NewClock(start), logs: &testsupport.LogBuffer{}, done: make(chan error, 1), returned: make(chan struct{})}
	if cfg.EpochPoll == 0 {
		cfg.EpochPoll = 1000 * time.Hour // its timer stays put while tests move the clock
	}
	h.poll = cfg.EpochPoll
	c := &cfg.Lifecycle
	c.Clock = h.clock
	c.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	c.IgnoreSignals = true
	c.LookupEnv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	if c.ProbeAddr == "" {
		c.ProbeAddr = "127.0.0.1:0"
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	h.w = w
	h.logs.LogOnFailure(t)
	return h
}

// run starts Run and registers a cleanup that stops it.
func (h *harness) run() {
	go func() { err := h.w.Run(context.Background()); close(h.returned); h.done <- err }()
	go func() { // the queue's requests expire at the drain (see fakeSource)
		select {
		case <-h.w.Lifecycle().Events().ShutdownInitiated.Done():
			for _, e := range h.expirers {
				e.expireAll()
			}
		case <-h.returned:
		}
	}()
	h.t.Cleanup(func() {
		// 9h: past any drain bound a test left running.
		if returned, _ := h.stopAdvancing("test over", 9*time.Hour); !returned {
			h.t.Error("Run did not return")
		}
	})
}

// stopAdvancing begins the shutdown and, every 10ms of real time, advances
// the fake clock by step until Run returns. It returns whether Run returned
// within guard and, if so, its error, which it leaves in h.done for later
// readers.
func (h *harness) stopAdvancing(reason string, step time.Duration) (returned bool, err error) {
	h.w.Lifecycle().BeginShutdown(reason)
	deadline := time.After(guard)
	for {
		select {
		case err := <-h.done:
			h.done <- err
			return true, err
		case <-deadline:
			return false, nil
		case <-time.After(10 * time.Millisecond):
			h.clock.Advance(step)
		}
	}
}

// shutdown begins the sequence and returns once the drain wait has armed
// its bound on the fake clock.
func (h *harness) shutdown() {
	h.t.Helper()
	before := h.clock.Pending()
	h.w.Lifecycle().BeginShutdown("test")
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	ended := h.w.Lifecycle().Events().WindowEnded
	go func() { // a drain with nothing to wait for may end before its bound is seen
		select {
		case <-ended.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := h.clock.WaitForTimers(ctx, before+1); err != nil && !ended.Fired() {
		h.t.Fatalf("the drain never armed its bound: %v", err)
	}
}

// wait returns Run's result.
func (h *harness) wait() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err
		return err
	case <-time.After(guard):
		h.t.Fatal("Run did not return")
		return nil
	}
}

// probe asks path of the Lifecycle's probe handler.
func (h *harness) probe(path string) (int, map[string]any) {
	h.t.Helper()
	rec := httptest.NewRecorder()
	h.w.Lifecycle().ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		h.t.Fatalf("GET %s: %d %q: %v", path, rec.Code, rec.Body, err)
	}
	return rec.Code, body
}

// expect asserts a probe's code and status word.
func (h *harness) expect(path string, code int, status string) map[string]any {
	h.t.Helper()
	c, body := h.probe(path)
	if c != code || body["status"] != status {
		h.t.Fatalf("GET %s = %d %v; want %d %q", path, c, body, code, status)
	}
	return body
}

// awaitEvent waits for a Lifecycle event.
func (h *harness) awaitEvent(e *lameduck.Event) {
	h.t.Helper()
	testsupport.Await(h.t, e)
}

// awaitFetch waits until the source's loop has begun a fetch.
func awaitFetch(t *testing.T, s *fakeSource) {
	t.Helper()
	testsupport.Recv(t, s.fetches, "the loop to fetch")
}

// boot starts Run and takes the worker through its boot: src's loop's
// first fetch is answered with an idle cycle, which ends it
// (StartupDone).
func (h *harness) boot(src *fakeSource) {
	h.t.Helper()
	h.run()
	awaitFetch(h.t, src)
	src.idleCycle(h.t)
	h.awaitEvent(h.w.Lifecycle().Events().StartupDone)
}

// awaitCancel waits until ctx, a job's context, ends, failing t with
// never if it has not after guard, and then unless its cause is want
// (nil: whatever the cause).
func awaitCancel(t *testing.T, ctx context.Context, want error, never string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(guard):
		t.Fatal(never)
	}
	if want != nil && !errors.Is(context.Cause(ctx), want) {
		t.Fatalf("cause %v; want %v", context.Cause(ctx), want)
	}
}

// nextPoll waits until the epoch poller sleeps on the fake clock (the only
// timer while a job runs), then wakes it.
func (h *harness) nextPoll() {
	h.t.Helper()
	testsupport.Timers(h.t, h.clock, 1) // the epoch poller sleeps
	h.clock.Advance(h.poll)
}

// silentSource is a fakeSource whose fetches the test may also end in
// silence (an error wrapping worker.ErrNoReply, on silent) or with an
// error (on fail).
type silentSource struct{ *fakeSource }

func newSilentSource() *silentSource {
	s := newSource()
	s.silent, s.fail = make(chan struct{}), make(chan struct{})
	return &silentSource{s}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/worker"
)

// demoQueue is the demo worker's job source once connected, whichever
// queue it is: the Source its loops share, where the fleet's newest epoch
// is read, and how a job of that Source is made a *countedJob.
type demoQueue struct {
	src    worker.Source
	epochs worker.EpochSource
	// job makes a job of src a countedJob: its body, and whether its
	// hand-back re-publishes it at its last delivery (NATS; nil: never).
	job func(worker.Job) *countedJob
	// attrs are the "demo-worker: consuming" line's, after the queue's kind.
	attrs []any
}

// undoer is what an open function of a queue did, to be undone, last
// first, should the function fail: it appends a func for each step.
type undoer []func()

// onError runs the recorded steps' undos, last first, when *err is not
// nil; open functions defer it with their named error result. Its pointer
// receiver sees the steps appended after the defer.
func (u *undoer) onError(err *error) {
	if *err == nil {
		return
	}
	for _, f := range slices.Backward(*u) {
		f()
	}
}

// publishedEpochs is an epoch store in which each runner publishes its own
// epoch (--epoch-source kv or table), withdrawn by Retire at shutdown.
type publishedEpochs interface {
	worker.EpochSource
	Retire(context.Context) error
}

// openEpochs returns where the fleet's newest epoch is read: static epochs
// (never superseded) unless --epoch-source is own, the queue's own store;
// else the store open returns (given the Lifecycle's draining test), its
// Retire registered as the closer name. Registered after the connection's
// closer, it runs before it: closers run in reverse. where follows the flag
// in open's error (" at --postgres=…", or empty).
func openEpochs(lc *lameduck.Lifecycle, o workerOptions, own, name, where string, open func(draining func() bool) (publishedEpochs, error)) (worker.EpochSource, error) {
	if o.epochSource != own {
		return worker.StaticEpochs(0), nil
	}
	e, err := open(lc.Events().ShutdownInitiated.Fired)
	if err != nil {
		return nil, demoErrorf("lameduck: demo-worker: --epoch-source=%s%s: %w; use --epoch-source=static to run without one", own, where, err)
	}
	if err := lc.AddCloser(name, e.Retire); err != nil {
		return nil, err
	}
	return e, nil
}

// demoSource is the demo worker's worker.Source: the queue's own Source,
// counting settled jobs in the metrics, and wedged after stallAfter
// fetches when that is positive (a stalled consumer, for tests). It is a
// worker.Drainer whenever the queue's Source is one, so the worker drains
// that Source after the loops (it hands back what it buffered, and ends
// its requests and listeners).
type demoSource struct {
	q          demoQueue
	stallAfter int
	metrics    *workerMetrics

	mu      sync.Mutex
	fetches int // guarded by mu
}

// Fetch is the queue's Fetch, its job a *countedJob; past stallAfter
// fetches it never returns before ctx ends.
func (s *demoSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	if s.stallAfter > 0 {
		s.mu.Lock()
		s.fetches++
		n := s.fetches
		s.mu.Unlock()
		if n > s.stallAfter {
			<-ctx.Done() // wedged: never returns on its own
			return nil, nil
		}
	}
	j, err := s.q.src.Fetch(ctx, wait)
	if j == nil || err != nil {
		return nil, err
	}
	c := s.q.job(j)
	c.metrics = s.metrics
	return c, nil
}

// Drain drains the queue's Source when it is a worker.Drainer, and
// returns its error; otherwise it returns nil at once.
func (s *demoSource) Drain(ctx context.Context) error {
	if d, ok := s.q.src.(worker.Drainer); ok {
		return d.Drain(ctx)
	}
	return nil
}

// countedJob is a job of the demo's queue whose settlements the metrics
// count, with its body (a demoJob as JSON).
type countedJob struct {
	worker.Job
	body []byte
	// requeues reports whether a hand-back under ctx re-publishes the job
	// at its last delivery rather than returning it (NATS); nil: never.
	requeues func(ctx context.Context) bool
	metrics  *workerMetrics
}

// Delivery is the queue's delivery count of the job (worker.Delivered),
// which spaces out the redeliveries of a failing job; 1 when the queue's
// job does not say.
func (j *countedJob) Delivery() int {
	if d, ok := j.Job.(worker.Delivered); ok {
		return d.Delivery()
	}
	return 1
}

// Ack is the queue's Ack, counted as done once it succeeds.
func (j *countedJob) Ack(ctx context.Context) error {
	err := j.Job.Ack(ctx)
	if err == nil && j.metrics != nil {
		j.metrics.done.Inc()
	}
	return err
}

// HandBack is the queue's HandBack, counted as a re-published copy when
// the runner hands a NATS job back at its last delivery, as a hand-back
// (delayed or not) otherwise.
func (j *countedJob) HandBack(ctx context.Context, delay time.Duration) error {
	requeue := j.requeues != nil && j.requeues(ctx)
	err := j.Job.HandBack(ctx, delay)
	if err != nil || j.metrics == nil {
		return err
	}
	if requeue {
		j.metrics.requeued.Inc()
	} else {
		j.metrics.back.WithLabelValues(strconv.FormatBool(delay > 0)).Inc()
	}
	return nil
}

// demoError is an error of the demo worker, worded once: the wrapped
// error's own "lameduck: " prefixes are left out of its message.
type demoError struct {
	msg string
	err error
}

func (e *demoError) Error() string { return e.msg }
func (e *demoError) Unwrap() error { return e.err }

// demoErrorf is fmt.Errorf for the demo worker's errors, which begin
// "lameduck: demo-worker": the errors it wraps (ldamqp's, ldpgx's,
// ldnats', which begin "lameduck: " too) are quoted without that prefix,
// so the line says it once, and on one line.
func demoErrorf(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	msg := "lameduck: " + strings.ReplaceAll(strings.TrimPrefix(err.Error(), "lameduck: "), "lameduck: ", "")
	msg = strings.NewReplacer("\n\t", " ", "\n", "; ").Replace(msg) // pgx's list of the addresses it tried: one line
	return &demoError{msg: msg, err: errors.Unwrap(err)}
}

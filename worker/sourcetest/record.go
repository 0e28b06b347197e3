package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/worker"
)

// plan is what a job's handler does, by id.
type plan int8

const (
	planOK        plan = iota // done after a few ms
	planErrorOnce             // its first attempt returns an error
	planPanicOnce             // its first attempt panics
	planAlways                // every attempt returns an error: dead-lettered at the limit
)

// idRec is what happened to one published id.
type idRec struct {
	plan        plan
	attempts    atomic.Int32 // handler calls past the freeze
	completions atomic.Int32 // handler calls that returned nil
	deliveries  atomic.Int32 // times a Fetch returned it
	ackFails    atomic.Int32 // its Acks that returned an error
}

// outcome is how a delivery's handler ended, set before the worker settles it.
type outcome int32

const (
	notRun    outcome = iota // the handler was never called
	done                     // it returned nil
	failed                   // it returned its own error or panicked
	cancelled                // it returned because its context ended
)

// books are a scenario's records: what the handlers did with each id and
// what the runners did with each delivery. Safe for concurrent use.
type books struct {
	ids         map[string]*idRec // immutable keys: the ids published
	completions atomic.Int64      // handler calls that returned nil
	handBacks   atomic.Int64

	mu        sync.Mutex
	causes    map[string]int // guarded by mu: hand-backs by cause
	worker    []string       // guarded by mu: the runner broke its side of the contract
	source    []string       // guarded by mu: the Source broke its side
	unknown   map[string]int // guarded by mu: delivered ids never published
	ackErrs   int            // guarded by mu
	backErrs  int            // guarded by mu
	slowFetch time.Duration  // guarded by mu: the longest Fetch past its allowance
}

func newBooks(ids []string, plans map[string]plan) *books {
	b := &books{ids: make(map[string]*idRec, len(ids)), causes: map[string]int{}, unknown: map[string]int{}}
	for _, id := range ids {
		b.ids[id] = &idRec{plan: plans[id]}
	}
	return b
}

// maxRecorded is how many messages of one kind (a side's breaches, a
// scenario's notes) a verdict keeps: enough to show what went wrong
// without burying it.
const maxRecorded = 20

// record appends the formatted message to list unless list holds
// maxRecorded already. The caller holds the lock that guards list.
func record(list *[]string, format string, args ...any) {
	if len(*list) < maxRecorded {
		*list = append(*list, fmt.Sprintf(format, args...))
	}
}

// workerBroke records a breach of the runner's side of the contract.
func (b *books) workerBroke(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	record(&b.worker, format, args...)
}

// sourceBroke records a breach of the Source's side of the contract.
func (b *books) sourceBroke(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	record(&b.source, format, args...)
}

// causeName names a hand-back's cause as the verdict counts it.
func causeName(cause error) string {
	switch {
	case cause == nil:
		return "failure"
	case errors.Is(cause, worker.ErrNotStarted):
		return "not-started"
	case errors.Is(cause, worker.ErrSuperseded):
		return "superseded"
	case errors.Is(cause, worker.ErrInterrupted):
		return "interrupted"
	case errors.Is(cause, worker.ErrDrainBound):
		return "drain-bound"
	default:
		return "exit"
	}
}

// causesString lists the hand-backs by cause, in a stable order.
func (b *books) causesString() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	names := make([]string, 0, len(b.causes))
	for n := range b.causes {
		names = append(names, n)
	}
	sort.Strings(names)
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", n, b.causes[n])
	}
	if s == "" {
		s = "none"
	}
	return s
}

// recSource is the Source under test as one runner sees it: every call is
// passed through unchanged, and recorded. A Fetch asks the queue only with
// a ticket (the scenario's budget paces the runners so that each drain
// finds jobs left to take); without one it returns an idle cycle after its
// wait. While its runner is frozen, a job a Fetch returned may be held back
// from the loop until the freeze lets it go: the fetch was under way as
// the drain began.
type recSource struct {
	inner worker.Source
	r     *runner
}

// Fetch calls the Source's Fetch and wraps the job it returns.
func (s *recSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	b := s.r.sc.books
	t := s.r.ticket(wait)
	if t == noTicket {
		return nil, nil
	}
	s.r.sc.fetching.Add(1)
	began := time.Now()
	job, err := s.fetch(ctx, wait)
	took := time.Since(began)
	s.r.sc.fetching.Add(-1)
	if job == nil {
		s.r.untake(t)
	}
	if allowance := wait + 2*s.r.sc.o.Latency + fetchSlack; took > allowance && ctx.Err() == nil {
		b.mu.Lock()
		b.slowFetch = max(b.slowFetch, took)
		b.mu.Unlock()
	}
	if job == nil {
		return nil, err
	}
	if err != nil {
		b.sourceBroke("Fetch returned a job and an error (%v): the loop drops such a job, never settling it", err)
	}
	d := &delivery{job: job, r: s.r, ticket: t}
	d.id = d.safeID()
	if rec := b.ids[d.id]; rec != nil {
		rec.deliveries.Add(1)
	} else {
		b.mu.Lock()
		b.unknown[d.id]++
		b.mu.Unlock()
	}
	s.r.mu.Lock()
	s.r.deliveries = append(s.r.deliveries, d)
	s.r.mu.Unlock()
	s.r.holdFetch()
	return d, err
}

// fetchSlack is what a Fetch may take past its wait and the relay's round
// trip before the verdict notes it slow: a scheduler under load, a queue
// that answers late.
const fetchSlack = 5 * time.Second

// fetch calls the inner Fetch, noting a panic before passing it on.
func (s *recSource) fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	defer func() {
		if v := recover(); v != nil {
			s.r.sc.books.sourceBroke("Fetch panicked: %v", v)
			panic(v)
		}
	}()
	return s.inner.Fetch(ctx, wait)
}

// Drain calls the Source's Drain, when it is a worker.Drainer; its error is
// recorded (nothing should be left to the queue by a clean drain).
func (s *recSource) Drain(ctx context.Context) error {
	d, ok := s.inner.(worker.Drainer)
	if !ok {
		return nil
	}
	err := d.Drain(ctx)
	if err != nil {
		s.r.drainErr.Store(err.Error())
	}
	return err
}

// delivery is one job a Fetch returned, as the loop sees it.
type delivery struct {
	job     worker.Job
	id      string
	r       *runner
	ticket  ticket       // what let its Fetch ask the queue
	settled atomic.Int32 // calls of Ack and HandBack
	ended   atomic.Int32 // outcome of the handler
	hctx    atomic.Value // context.Context: the handler's
}

// refund gives the scenario's budget back the ticket of a job that returns
// to the queue: the budget paces jobs done, not deliveries.
func (d *delivery) refund() {
	if d.ticket == budgetTicket {
		d.r.sc.budget.Add(1)
		d.r.sc.budgetMoved()
	}
}

func (d *delivery) safeID() (id string) {
	defer func() {
		if v := recover(); v != nil {
			d.r.sc.books.sourceBroke("Job.ID panicked: %v", v)
			id = ""
		}
	}()
	return d.job.ID()
}

// ID returns the job's own ID.
func (d *delivery) ID() string { return d.job.ID() }

// Delivery returns the job's delivery count when it reports one, 1
// otherwise: what the loop assumes of a job that does not.
func (d *delivery) Delivery() int {
	if dd, ok := d.job.(worker.Delivered); ok {
		return dd.Delivery()
	}
	return 1
}

// Ack acknowledges the job, checking the runner settles it once, and only
// after its handler returned nil.
func (d *delivery) Ack(ctx context.Context) error {
	b := d.r.sc.books
	if n := d.settled.Add(1); n > 1 {
		b.workerBroke("job %s of runner %d settled %d times (the last an Ack)", d.id, d.r.n, n)
	}
	if o := outcome(d.ended.Load()); o != done {
		b.workerBroke("job %s of runner %d acknowledged though its handler did not return nil (outcome %d)", d.id, d.r.n, o)
	}
	err := d.job.Ack(ctx)
	if err != nil {
		b.mu.Lock()
		b.ackErrs++
		b.mu.Unlock()
		if rec := b.ids[d.id]; rec != nil {
			rec.ackFails.Add(1)
		}
		d.r.sc.ackFailed(d.id, err)
		d.refund() // the queue will deliver it again
	}
	return err
}

// HandBack hands the job back, checking the runner settles it once and
// names its own reasons (HandBackCause) for every hand-back that is not the
// job's own failure.
func (d *delivery) HandBack(ctx context.Context, delay time.Duration) error {
	b := d.r.sc.books
	cause := worker.HandBackCause(ctx)
	if n := d.settled.Add(1); n > 1 {
		b.workerBroke("job %s of runner %d settled %d times (the last a HandBack, cause %v)", d.id, d.r.n, n, cause)
	}
	switch o := outcome(d.ended.Load()); {
	case o == done:
		b.workerBroke("job %s of runner %d handed back (cause %v) though its handler returned nil", d.id, d.r.n, cause)
	case cause == nil && o != failed:
		b.workerBroke("job %s of runner %d handed back as its own failure (HandBackCause nil, which counts against the delivery limit) though its handler did not fail (outcome %d)", d.id, d.r.n, o)
	case cause != nil && o == failed:
		if hctx, _ := d.hctx.Load().(context.Context); hctx != nil && hctx.Err() == nil {
			b.workerBroke("job %s of runner %d failed on its own, with nothing cancelled, yet was handed back with the runner's cause %v (which spares the delivery limit)", d.id, d.r.n, cause)
		}
	}
	b.handBacks.Add(1)
	b.mu.Lock()
	b.causes[causeName(cause)]++
	b.mu.Unlock()
	err := d.job.HandBack(ctx, delay)
	d.refund() // back at the queue, to be delivered again
	if err != nil {
		b.mu.Lock()
		b.backErrs++
		b.mu.Unlock()
		d.r.sc.handBackFailed(d.id, cause, err)
	}
	return err
}

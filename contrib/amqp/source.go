package ldamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrSourceClosed is what Fetch returns, wrapped, after [Source.Close].
var ErrSourceClosed = errors.New("ldamqp: the Source is closed")

// SourceConfig configures a [Source].
type SourceConfig struct {
	// Queue is the work queue, as it was declared ([DeclareQueue]): its
	// Name, its MaxDeliveries and DeliveryLimit. Required.
	Queue Queue
	// Prefetch is the consumer's prefetch count (basic.qos): how many
	// jobs RabbitMQ may have delivered to the Source and not yet seen
	// settled. Set it to the number of loops that share the Source (n
	// jobs at once need n loops, and n deliveries): each idle loop then
	// finds its job at once, and no job waits in this runner's buffer
	// while another runner idles. More than the loops buffers jobs ahead
	// (a little throughput for short jobs); [Source.Drain] hands them
	// back. Zero means 1; negative is an error.
	Prefetch int
	// ConsumerTimeout, when positive, is sent as the consumer's
	// x-consumer-timeout argument (whole milliseconds): how long RabbitMQ
	// lets a delivery go unacknowledged before it takes it back, which
	// overrides the queue's x-consumer-timeout, its consumer-timeout
	// policy and the server's consumer_timeout (30 minutes by default) on
	// RabbitMQ 3.11.15, 3.12 and later; earlier versions ignore it.
	// Set it above your longest job and the drain bound
	// (LAMEDUCK_DRAIN_TIMEOUT); docs/amqp.md, "Long jobs: the consumer
	// timeout". Zero means the queue's or the server's; negative is an
	// error.
	ConsumerTimeout time.Duration
	// ID names a job in the runner's logs and probe bodies, from its
	// delivery. Nil means the message's MessageId property. It is called
	// at most once per delivery, by [Job.ID]; it must not modify the
	// delivery.
	ID func(d *amqp.Delivery) string
	// Redial, when set, is called by Fetch when the Source's connection
	// is closed (the broker went away, a heartbeat was missed), to obtain
	// a new one; the Source owns the connections it returns and closes
	// them in [Source.Close]. It must not enable amqp091-go's automatic
	// recovery (Config.Recovery), for the reason NewSource gives. Nil: a
	// Fetch on a closed connection returns an error every time, and the
	// runner needs a restart to consume again.
	Redial func(ctx context.Context) (*amqp.Connection, error)
	// Logger receives a warning when a job is dead-lettered at its last
	// delivery. Nil means slog.Default().
	Logger *slog.Logger
}

// Source is a [worker.Source] (and a [worker.Drainer]) on a RabbitMQ
// quorum queue: give it to one [worker.Loop], or to n loops to run n jobs
// at once (SourceConfig.Prefetch n). The job it returns is a [*Job].
//
// The first Fetch opens a channel on the connection, sets its prefetch
// (basic.qos) and starts a consumer (basic.consume, manual
// acknowledgements); each Fetch then returns a delivery from the
// consumer's buffer, or waits for one. A delivery stays unacknowledged on
// its channel while its job runs, however long (RabbitMQ's consumer
// timeout aside: docs/amqp.md, "Long jobs: the consumer timeout"), until
// the loop acknowledges it or hands it back through the Job.
//
// What RabbitMQ does without the Source: a delivery on a channel that
// closes (the connection broke, the process was killed, the consumer
// timeout passed on RabbitMQ 4.2 and earlier) is requeued by RabbitMQ
// itself and delivered again, a job then possibly running twice (at least
// once); from RabbitMQ 4.3 the consumer timeout cancels the consumer and
// takes its deliveries back the same way.
// RabbitMQ 3 counts such a return in x-delivery-count (RabbitMQ 4.3 does
// not), which [Job.Delivery] includes, and dead-letters a job returned so
// more than Queue.DeliveryLimit times since its last copy.
//
// When the channel closes the Source opens a new one at the next Fetch;
// when the connection closes, Fetch calls SourceConfig.Redial, or returns
// an error. Either way Fetch's error is the loop's failed cycle, logged.
//
// Create one with [NewSource]; the zero value is not usable. Its methods
// are safe for concurrent use.
type Source struct {
	q            Queue
	most         int // q's MaxDeliveries
	limit        int // q's x-delivery-limit
	prefetch     int
	consumerArgs amqp.Table
	id           func(*amqp.Delivery) string
	redial       func(context.Context) (*amqp.Connection, error)
	log          *slog.Logger
	tagPrefix    string

	// setup is held across the I/O that opens a connection, a channel and
	// a consumer, and across Drain's swap of the consumer, so that
	// concurrent Fetches start one consumer; it is taken before mu.
	setup sync.Mutex
	// drainMu is held across a Drain, so that a second one returns only
	// once the first has finished.
	drainMu sync.Mutex

	mu       sync.Mutex
	conn     *amqp.Connection   // guarded by mu: the connection channels are opened on
	connDown chan *amqp.Error   // guarded by mu: conn's close notification
	connErr  *amqp.Error        // guarded by mu: why conn closed, once read
	owned    []*amqp.Connection // guarded by mu: connections Redial returned; Close closes them
	cur      *consumer          // guarded by mu: the consumer Fetch reads; nil before the first Fetch, after Drain, after it ended
	pubs     []*publisher       // guarded by mu: idle channels copies are published on
	closed   bool               // guarded by mu: Close was called

	tags atomic.Uint64 // consumer tags issued
}

// NewSource returns a Source on conn, the application's connection (an
// amqp.Dial without Config.Recovery), for the queue cfg.Queue describes.
// It does no I/O: the channels and the consumer are opened by the first
// Fetch, and the queue must then exist ([DeclareQueue]).
//
// It returns an error naming the fix when conn is nil, when cfg.Queue is
// invalid (see [Queue]), when Prefetch or ConsumerTimeout is negative, and
// when conn has amqp091-go's automatic recovery enabled: that recovery
// reopens a channel under the Source, where the delivery tags of the jobs
// still running would acknowledge other jobs, delivered on the new
// channel with the same tags (use SourceConfig.Redial instead).
func NewSource(conn *amqp.Connection, cfg SourceConfig) (*Source, error) {
	const what = "ldamqp.NewSource"
	if conn == nil {
		return nil, errors.New("lameduck: ldamqp.NewSource: the *amqp.Connection is nil; pass the connection the runner consumes on")
	}
	if err := cfg.Queue.check(what); err != nil {
		return nil, err
	}
	switch {
	case cfg.Prefetch < 0:
		return nil, fmt.Errorf("lameduck: ldamqp.NewSource: SourceConfig.Prefetch=%d must not be negative; set it to the number of loops sharing the Source (0 means 1)", cfg.Prefetch)
	case cfg.ConsumerTimeout < 0:
		return nil, fmt.Errorf("lameduck: ldamqp.NewSource: SourceConfig.ConsumerTimeout=%s must not be negative; use 0 for the queue's or the server's consumer_timeout", cfg.ConsumerTimeout)
	}
	if err := noRecovery(what, conn); err != nil {
		return nil, err
	}
	s := &Source{
		q:        cfg.Queue,
		most:     cfg.Queue.maxDeliveries(),
		limit:    cfg.Queue.limit(),
		prefetch: max(cfg.Prefetch, 1),
		id:       cfg.ID,
		redial:   cfg.Redial,
		log:      cfg.Logger,
	}
	if cfg.ConsumerTimeout > 0 {
		s.consumerArgs = amqp.Table{"x-consumer-timeout": max(cfg.ConsumerTimeout.Milliseconds(), 1)}
	}
	if s.id == nil {
		s.id = func(d *amqp.Delivery) string { return d.MessageId }
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "runner"
	}
	s.tagPrefix = "lameduck-" + host + "-"
	s.useConn(conn, false)
	return s, nil
}

// noRecovery refuses a connection with amqp091-go's automatic recovery.
func noRecovery(what string, conn *amqp.Connection) error {
	if conn.IsRecoveryEnabled() {
		return fmt.Errorf("lameduck: %s: the connection has amqp091-go's automatic recovery enabled (Config.Recovery): it would reopen the consumer's channel under the Source, and a running job's delivery tag would then acknowledge another job delivered on the new channel; dial without Config.Recovery, and set SourceConfig.Redial to reconnect",
			what)
	}
	return nil
}

// useConn makes conn the Source's connection.
func (s *Source) useConn(conn *amqp.Connection, owned bool) {
	down := conn.NotifyClose(make(chan *amqp.Error, 1))
	s.mu.Lock()
	s.conn, s.connDown, s.connErr = conn, down, nil
	if owned {
		s.owned = slices.DeleteFunc(s.owned, (*amqp.Connection).IsClosed) // the ones that broke
		s.owned = append(s.owned, conn)
	}
	s.mu.Unlock()
}

// Fetch returns the next job the consumer delivers, waiting up to wait,
// as a [*Job]. The first Fetch (and the first after the consumer ended,
// or after Drain) opens a channel, sets its prefetch and starts the
// consumer, each a round trip to RabbitMQ, then calls
// [worker.Consuming](ctx): from then on RabbitMQ holds the request. It
// returns:
//
//   - a job the consumer had buffered, at once, or the first delivered
//     within wait;
//   - (nil, nil) when none came within wait (the consumer's buffer is
//     empty: an idle cycle), when ctx ended (the process is exiting; a
//     delivery that arrives later stays in the buffer for the next Fetch
//     or for Drain), and when Drain cancelled the consumer meanwhile;
//   - an error when the consumer could not be started (the connection or
//     the channel is closed and SourceConfig.Redial is nil or failed, the
//     queue does not exist) or ended (its channel closed: RabbitMQ has
//     requeued the jobs it held; RabbitMQ cancelled it: the queue was
//     deleted, or its consumer timeout passed). The next Fetch starts a
//     new consumer.
//
// Fetch never takes a delivery from the buffer without returning it. It
// does not retry; the loop does. It does not return [worker.ErrNoReply]:
// a consumer's empty buffer is RabbitMQ's answer, and a connection that
// stopped carrying anything is closed by its heartbeat (amqp091-go's
// Config.Heartbeat, 10s by default), after which Fetch returns errors.
func (s *Source) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	c, err := s.consumer(ctx)
	if err != nil {
		return nil, err
	}
	worker.Consuming(ctx)
	var expired <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	} else {
		select {
		case d, ok := <-c.deliveries:
			if ok {
				return c.newJob(d), nil
			}
			return nil, s.ended(c)
		default:
			return nil, nil
		}
	}
	select {
	case d, ok := <-c.deliveries:
		if ok {
			return c.newJob(d), nil
		}
		return nil, s.ended(c)
	case <-expired:
		return nil, nil
	case <-ctx.Done():
		return nil, nil
	}
}

// consumer returns the Source's consumer, starting one when there is none
// or its channel has closed.
func (s *Source) consumer(ctx context.Context) (*consumer, error) {
	s.mu.Lock()
	c, closed := s.cur, s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("lameduck: amqp: fetch from queue %q: %w", s.q.Name, ErrSourceClosed)
	}
	if c != nil && !c.ch.IsClosed() {
		return c, nil
	}
	s.setup.Lock()
	defer s.setup.Unlock()
	s.mu.Lock()
	c, closed = s.cur, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("lameduck: amqp: fetch from queue %q: %w", s.q.Name, ErrSourceClosed)
	case c != nil && !c.ch.IsClosed():
		return c, nil
	case c != nil:
		s.retire(c)
	}
	conn, err := s.connection(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := openChannel(conn)
	if err != nil {
		return nil, fmt.Errorf("lameduck: amqp: open a channel to consume queue %q: %w", s.q.Name, err)
	}
	c = &consumer{src: s, channel: ch, tag: s.tagPrefix + strconv.FormatUint(s.tags.Add(1), 10)}
	if err := ch.ch.Qos(s.prefetch, 0, false); err != nil {
		ch.close()
		return nil, fmt.Errorf("lameduck: amqp: set the prefetch of queue %q's consumer to %d (basic.qos): %w", s.q.Name, s.prefetch, err)
	}
	c.deliveries, err = ch.ch.Consume(s.q.Name, c.tag, false, false, false, false, s.consumerArgs)
	if err != nil {
		ch.close()
		return nil, fmt.Errorf("lameduck: amqp: consume queue %q: %w; declare the queue before the runner starts (ldamqp.DeclareQueue)", s.q.Name, err)
	}
	s.mu.Lock()
	if s.closed { // closed while starting
		s.mu.Unlock()
		ch.close()
		return nil, fmt.Errorf("lameduck: amqp: fetch from queue %q: %w", s.q.Name, ErrSourceClosed)
	}
	s.cur = c
	s.mu.Unlock()
	return c, nil
}

// connection returns the Source's connection, redialled through Redial
// when it is closed.
func (s *Source) connection(ctx context.Context) (*amqp.Connection, error) {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if !conn.IsClosed() {
		return conn, nil
	}
	reason := s.connReason()
	if s.redial == nil {
		return nil, fmt.Errorf("lameduck: amqp: the connection to RabbitMQ is closed (%s); amqp091-go does not reconnect: set SourceConfig.Redial so the Source dials again, or let the process restart",
			reason)
	}
	conn, err := s.redial(ctx)
	if err != nil {
		return nil, fmt.Errorf("lameduck: amqp: the connection to RabbitMQ is closed (%s), and SourceConfig.Redial failed: %w", reason, err)
	}
	if conn == nil {
		return nil, fmt.Errorf("lameduck: amqp: the connection to RabbitMQ is closed (%s), and SourceConfig.Redial returned no connection and no error; return the error", reason)
	}
	if err := noRecovery("SourceConfig.Redial", conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		_ = conn.Close()
		return nil, fmt.Errorf("lameduck: amqp: fetch from queue %q: %w", s.q.Name, ErrSourceClosed)
	}
	s.useConn(conn, true)
	return conn, nil
}

// connReason says why the Source's connection closed.
func (s *Source) connReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := closeNoticeLocked(&s.connErr, s.connDown); e != nil {
		return e.Error()
	}
	return "closed by the application"
}

// closeNoticeLocked returns why a connection or channel closed: *seen, or
// else the notice waiting on down, which it keeps in *seen; nil when
// neither says. It does not wait for a notice. The caller holds the lock
// that guards *seen.
func closeNoticeLocked(seen **amqp.Error, down <-chan *amqp.Error) *amqp.Error {
	if *seen == nil {
		select {
		case e, ok := <-down:
			if ok && e != nil {
				*seen = e
			}
		default:
		}
	}
	return *seen
}

// ended retires c, whose delivery channel closed, and returns Fetch's
// answer: nil when Drain cancelled it, an error saying why otherwise.
func (s *Source) ended(c *consumer) error {
	c.mu.Lock()
	cancelled := c.cancelled
	c.mu.Unlock()
	closed := c.ch.IsClosed() // before retire, which closes it
	s.retire(c)
	switch {
	case cancelled:
		return nil
	case closed:
		return fmt.Errorf("lameduck: amqp: the channel of queue %q's consumer closed (%s): RabbitMQ requeued the jobs it held unacknowledged, and delivers them again; the next fetch opens a new channel",
			s.q.Name, c.reason())
	default:
		return fmt.Errorf("lameduck: amqp: RabbitMQ cancelled queue %q's consumer (basic.cancel: the queue was deleted, or a delivery outlived its consumer timeout); the next fetch starts a new consumer",
			s.q.Name)
	}
}

// retire takes c out of service: it is no longer the Source's consumer,
// and its channel closes once no job it delivered is unsettled.
func (s *Source) retire(c *consumer) {
	s.mu.Lock()
	if s.cur == c {
		s.cur = nil
	}
	s.mu.Unlock()
	c.mu.Lock()
	c.retired = true
	idle := c.held == 0
	c.mu.Unlock()
	if idle {
		c.close()
	}
}

// Drain releases the Source's claim on the queue, in order:
//
//  1. it makes a synchronous basic.get on the queue, which every
//     settlement sent before it precedes, so the deliveries they let
//     RabbitMQ make to the consumer reach it first (a message the get
//     returns is handed back in step 3);
//  2. it cancels the consumer (basic.cancel) and waits for RabbitMQ's
//     cancel-ok: RabbitMQ then delivers nothing more to it;
//  3. it hands back each delivery the consumer had buffered and no Fetch
//     returned, all at once, as the runner's own reason: a copy is
//     published to the work queue and confirmed, then the original
//     acknowledged, so the hand-back counts no delivery and never
//     dead-letters the job (see [Job.HandBack]);
//  4. it closes the consumer's channel once no job it delivered is
//     unsettled (at once, when the loops have returned).
//
// Each step's round trip is bounded by ctx.
//
// It returns nil when nothing can still reach the Source: after the
// above, and at once when no consumer runs or its channel has closed
// (RabbitMQ then requeued what it held). It returns an error when ctx
// ended before RabbitMQ answered steps 1 and 2 (the channel is then left
// open, holding its jobs unacknowledged, until the connection closes), or
// a hand-back failed, saying what RabbitMQ will do with those jobs:
// requeue them when the channel closes (at the latest when the process
// exits and its connection closes), which counts a delivery on RabbitMQ
// 3. A Fetch
// after Drain starts a new consumer. Safe to call more than once and
// concurrently with Fetch (a Source shared by several workers is drained
// by each).
//
// What it cannot prevent: a message that reaches the queue in the instant
// of the cancel (a publish, a wait queue's expiry, another consumer's
// return) may be assigned to the consumer as it is cancelled. It is not
// lost: RabbitMQ 3's quorum queues take it back themselves, counting a
// delivery (rabbitmq-server#3729); a delivery that arrives after
// cancel-ok is dropped by amqp091-go, and RabbitMQ requeues it when step
// 4 closes the channel.
func (s *Source) Drain(ctx context.Context) error {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	s.setup.Lock()
	s.mu.Lock()
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	s.setup.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.cancelled = true
	c.mu.Unlock()
	if c.ch.IsClosed() {
		s.retire(c)
		return nil
	}
	// A barrier first: a basic.get is a synchronous command to the quorum
	// queue, applied after the settlements this channel sent before it, so
	// every delivery those settlements freed the consumer's prefetch for
	// reaches the channel before the cancel. Without it, RabbitMQ 3 takes
	// such a delivery back itself once the consumer is cancelled, and
	// counts it (rabbitmq-server#3729). What the get takes is handed back
	// with the buffered deliveries.
	var got []amqp.Delivery
	err := c.call(ctx, func() error {
		d, ok, err := c.ch.Get(s.q.Name, false)
		if ok {
			got = append(got, d)
		}
		return err
	})
	if err == nil {
		err = c.call(ctx, func() error { return c.ch.Cancel(c.tag, false) })
	}
	if err != nil && c.ch.IsClosed() {
		s.retire(c)
		return nil // RabbitMQ requeued what the channel held
	}
	if err != nil {
		// The method still waits for its answer, holding the channel:
		// the channel stays open, for the connection's close to end.
		c.mu.Lock()
		c.retired = true
		c.mu.Unlock()
		return fmt.Errorf("lameduck: amqp: drain queue %q: RabbitMQ did not answer the end of consumer %q (basic.get, basic.cancel: %w); the jobs it holds stay unacknowledged on its channel, and RabbitMQ requeues them when the connection closes (at the latest when the process exits), counting a delivery on RabbitMQ 3",
			s.q.Name, c.tag, err)
	}
	// After cancel-ok amqp091-go closes the consumer's buffer once it has
	// passed on every delivery that came before; a channel closing
	// meanwhile closes it too (RabbitMQ requeues those itself).
	for d := range c.deliveries {
		got = append(got, d)
	}
	// Handed back all at once: each is a copy and its confirm, then an ack
	// and its proof, round trips that overlap on channels of their own.
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, d := range got {
		j := c.newJob(d)
		wg.Go(func() {
			if err := j.handBack(ctx, 0, errDrained); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("lameduck: amqp: drain queue %q: a job buffered and never fetched, %q: %w", s.q.Name, j.name(), err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s.retire(c)
	return errors.Join(errs...)
}

// errDrained is the runner's reason Drain gives for the hand-back of a
// buffered delivery.
var errDrained = errors.New("ldamqp: buffered by the consumer when the runner drained; never fetched")

// Close closes the Source's channels, which makes RabbitMQ requeue every
// job they hold unacknowledged (counting a delivery on RabbitMQ 3: call
// Drain first, after the loops have returned, and a drained Source holds
// none), and the connections SourceConfig.Redial returned; the connection
// given to NewSource stays open, the application's to close. A Fetch
// after Close returns an error wrapping [ErrSourceClosed]; a job's Ack or
// HandBack after it returns an error. It always returns nil; it is safe to
// call more than once.
func (s *Source) Close() error {
	s.setup.Lock()
	s.mu.Lock()
	s.closed = true
	c, pubs, owned := s.cur, s.pubs, s.owned
	s.cur, s.pubs, s.owned = nil, nil, nil
	s.mu.Unlock()
	s.setup.Unlock()
	if c != nil {
		c.close()
	}
	for _, p := range pubs { // a busy one is closed when its publish ends
		p.close()
	}
	for _, conn := range owned {
		_ = conn.Close()
	}
	return nil
}

// channel is an AMQP channel and its close notification.
type channel struct {
	ch   *amqp.Channel
	down chan *amqp.Error // the close notification: an error, then closed
	rpc  sync.Mutex       // serialises synchronous methods: amqp091-go hands each caller the next reply, whatever it answers

	mu   sync.Mutex
	err  *amqp.Error // guarded by mu: why it closed, once read
	shut bool        // guarded by mu: close was called
}

func openChannel(conn *amqp.Connection) (*channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	return &channel{ch: ch, down: ch.NotifyClose(make(chan *amqp.Error, 1))}, nil
}

// reason says why the channel closed.
func (c *channel) reason() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e := closeNoticeLocked(&c.err, c.down); {
	case e != nil:
		return e.Error()
	case c.shut:
		return "closed by the Source"
	default:
		return "its connection closed"
	}
}

// close closes the channel, once.
func (c *channel) close() {
	c.mu.Lock()
	shut := c.shut
	c.shut = true
	c.mu.Unlock()
	if !shut {
		c.rpc.Lock()
		_ = c.ch.Close()
		c.rpc.Unlock()
	}
}

// call runs fn, a synchronous method on the channel, serialised with the
// others, and returns its error, or the cause of ctx when ctx ends first
// (fn then goes on, in a goroutine, until RabbitMQ answers or the
// connection closes).
func (c *channel) call(ctx context.Context, fn func() error) error {
	if ctx.Done() == nil {
		c.rpc.Lock()
		defer c.rpc.Unlock()
		return fn()
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		c.rpc.Lock()
		defer c.rpc.Unlock()
		done <- fn()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// consumer is one basic.consume on a channel of its own.
type consumer struct {
	*channel
	src        *Source
	tag        string
	deliveries <-chan amqp.Delivery

	// guarded by channel.mu:
	held      int  // jobs returned and not yet settled
	retired   bool // no longer the Source's consumer: the channel closes once held is 0
	cancelled bool // Drain cancelled it

	proving sync.Mutex
	running bool   // guarded by proving: rounds is running
	next    *round // guarded by proving: the round trip the callers of sync wait for, not begun yet
}

// newJob makes d a Job, held by c until it is settled.
func (c *consumer) newJob(d amqp.Delivery) *Job {
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
	j := &Job{c: c, d: d}
	j.prior = intHeader(d.Headers, HeaderDeliveries)
	if d.Redelivered { // a publisher's own x-delivery-count is not RabbitMQ's
		j.returned = intHeader(d.Headers, "x-delivery-count")
	}
	return j
}

// release ends the hold of a settled job, closing a retired consumer's
// channel after its last.
func (c *consumer) release() {
	c.mu.Lock()
	c.held--
	last := c.retired && c.held == 0
	c.mu.Unlock()
	if last {
		c.close()
	}
}

// sync waits for a synchronous round trip on the channel (basic.qos,
// unchanged) that began after it was called: its reply proves RabbitMQ
// has processed every method the caller sent on the channel before
// (AMQP 0-9-1 processes a channel's methods in order). Callers that come
// while a round trip is in flight share the next one, so n acks at once
// cost two round trips, not n. It returns the round trip's error, or the
// cause of ctx when ctx ends first.
func (c *consumer) sync(ctx context.Context) error {
	c.proving.Lock()
	r := c.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		c.next = r
	}
	start := !c.running
	c.running = true
	c.proving.Unlock()
	if start {
		go c.rounds()
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// round is one round trip of sync, shared by the callers that wait for it.
type round struct {
	done chan struct{} // closed when err is set
	err  error
}

// rounds runs the round trips callers wait for, one after another, until
// none is waiting.
func (c *consumer) rounds() {
	for {
		c.proving.Lock()
		r := c.next
		c.next = nil
		if r == nil {
			c.running = false
			c.proving.Unlock()
			return
		}
		c.proving.Unlock()
		c.rpc.Lock()
		r.err = c.ch.Qos(c.src.prefetch, 0, false)
		c.rpc.Unlock()
		close(r.done)
	}
}

// intHeader reads h[key] as a non-negative integer; 0 when absent or not
// an integer.
func intHeader(h amqp.Table, key string) int {
	var n int64
	switch v := reflect.ValueOf(h[key]); {
	case v.CanInt():
		n = v.Int()
	case v.CanUint():
		n = int64(min(v.Uint(), 1<<62))
	case v.Kind() == reflect.String:
		n, _ = strconv.ParseInt(v.String(), 10, 64)
	}
	if n < 0 || n > 1<<30 {
		return 0
	}
	return int(n)
}

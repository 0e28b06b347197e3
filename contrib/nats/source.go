package ldnats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of the copy that [Job.HandBack] publishes when the runner hands
// back a job at its last delivery (docs/runners.md, "Hand-backs and
// delivery limits"). A dead-letter tool or a handler may read them.
const (
	// HeaderRequeuedFrom holds the stream sequence, in decimal, of the
	// message the copy replaces.
	HeaderRequeuedFrom = "Lameduck-Requeued-From"
	// HeaderRequeueCause holds the runner's reason for the hand-back, the
	// text of [worker.HandBackCause].
	HeaderRequeueCause = "Lameduck-Requeue-Cause"
)

// settleTimeout bounds each round trip of an Ack or a HandBack.
const settleTimeout = 5 * time.Second

// defaultAckWait is the server's AckWait when a consumer's cached
// configuration names none.
const defaultAckWait = 30 * time.Second

// SourceConfig configures a [Source]. The zero value is usable.
type SourceConfig struct {
	// ID names a job in the runner's logs and probe bodies, from its
	// message. Nil means the message's Nats-Msg-Id header (the publisher's
	// jetstream.WithMsgID). An empty answer names the job
	// "seq-<stream sequence>". It is called once per delivery, from Fetch.
	ID func(msg jetstream.Msg) string
	// RequeueSubject is the subject a job's copy is published to when the
	// runner hands the job back at its last delivery (see
	// [Job.HandBack]); it must be one the stream captures and stores as
	// the job's subject. Nil means: the message's stored subject when one
	// of the stream's subjects captures it, else the subject that the
	// stream's SubjectTransform maps onto it when the transform is made of
	// literal tokens and wildcards ("in.>" → "work.>"); else there is none,
	// and such a hand-back is an error that says so.
	RequeueSubject func(msg jetstream.Msg) string
	// Logger receives a warning when an in-progress ack fails (the job may
	// then be redelivered while it runs), and a line for each job that
	// reached a request the Source had given up on. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Source is a [worker.Source] and [worker.Drainer] on a JetStream pull
// consumer: give it to a [worker.Loop]. Each Fetch sends the consumer one
// pull request for one message and waits for the server's answer; the job
// it returns is a [*Job].
//
// No delivery is abandoned (docs/runners.md, "Job sources"). Fetch
// returns only on the server's own word: a message, or the request's
// expiry (status 408) or end (409: the consumer was deleted, its leader
// changed, too many requests wait); the runner never cancels it at the
// drain. A request the server does not answer within the fetch's wait plus
// an allowance for the round trip (half the wait, plus 2s) ends the Fetch
// in silence ([worker.ErrNoReply]), but the Source keeps listening to it:
// every pull request is answered on one subscription of the Source, and a
// job that reaches a request nobody waits for any more is returned by the
// next Fetch, or handed back at once once the Source is draining. Drain
// waits for such requests to end.
//
// While a job is in flight (from Fetch until its Ack or HandBack), the
// Source sends an in-progress ack (jetstream.Msg.InProgress) every third
// of the consumer's AckWait, so the server does not redeliver a job that
// runs longer than its ack wait, however long it runs: the handler needs
// no keep-alive of its own. The AckWait is the one the consumer had when
// the handle passed to [NewSource] was obtained (jetstream.Consumer's
// CachedInfo); a change made to the consumer later is seen by a new
// Source.
//
// Create one with [NewSource]; the zero value is not usable. A Source is
// safe for concurrent use: several loops may share one.
type Source struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	cons       jetstream.Consumer
	stream     string        // immutable: the consumer's stream
	consumer   string        // immutable: the consumer's name
	next       string        // immutable: the pull request's subject
	maxDeliver int           // immutable: the consumer's MaxDeliver; ≤ 0: unlimited
	ackWait    time.Duration // immutable
	every      time.Duration // immutable: the in-progress ack interval
	id         func(jetstream.Msg) string
	requeueTo  func(jetstream.Msg) string
	log        *slog.Logger
	inbox      string // immutable: the prefix of every pull request's reply subject, <inbox>.<token>

	mu       sync.Mutex
	sub      *nats.Subscription       // guarded by mu: the replies' subscription; nil before the first Fetch
	reqs     map[string]*pull         // guarded by mu: requests the server may still answer, by reply token
	strays   []*Job                   // guarded by mu: jobs that reached a request nobody waited for, oldest first
	seq      uint64                   // guarded by mu: the last reply token
	draining bool                     // guarded by mu: Drain was called, or a Fetch returned for the exit
	known    map[context.Context]bool // guarded by mu: loops' contexts told Consuming
	ended    chan struct{}            // guarded by mu: closed (and replaced) whenever a request leaves reqs
}

// pull is one pull request the server may still answer.
type pull struct {
	token      string             // immutable: its reply subject's last token
	reconnects uint64             // immutable: the connection's reconnects when it was sent
	sub        *nats.Subscription // immutable once Fetch has made it: its answers' subscription
	wait       time.Duration
	answer     chan *nats.Msg // buffered 1: the message or status, to the waiting Fetch
	abandoned  bool           // guarded by Source.mu: no Fetch waits for it any more
	since      time.Time      // guarded by Source.mu: when it was abandoned
}

// NewSource returns a Source on cons, a pull consumer of a stream of js.
// The connection of js (js.Conn()) carries the pull requests, the acks and
// the copies published by a hand-back at a job's last delivery.
//
// It does no I/O: it reads the consumer's cached configuration, and
// returns an error when js or cons is nil, or when the consumer's
// AckPolicy is not jetstream.AckExplicitPolicy (a runner acknowledges
// each job on its own; create the consumer with AckExplicitPolicy).
func NewSource(js jetstream.JetStream, cons jetstream.Consumer, cfg SourceConfig) (*Source, error) {
	if js == nil || cons == nil {
		return nil, errors.New("lameduck: ldnats.NewSource: js and cons must not be nil; pass the JetStream handle and the pull consumer the runner reads")
	}
	info := cons.CachedInfo()
	if info == nil {
		return nil, errors.New("lameduck: ldnats.NewSource: the consumer has no cached information; obtain it with Stream.Consumer, CreateConsumer or CreateOrUpdateConsumer")
	}
	cc := info.Config
	if cc.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("lameduck: ldnats.NewSource: consumer %q has AckPolicy %s; a runner acknowledges each job on its own: use jetstream.AckExplicitPolicy",
			info.Name, cc.AckPolicy)
	}
	ackWait := cc.AckWait
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	prefix := apiPrefix(js)
	nc := js.Conn()
	s := &Source{
		nc: nc, js: js, cons: cons, stream: info.Stream, consumer: info.Name,
		next:       prefix + "CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name,
		maxDeliver: cc.MaxDeliver, ackWait: ackWait, every: ackWait / 3,
		id: cfg.ID, requeueTo: cfg.RequeueSubject, log: cfg.Logger,
		inbox: nc.NewRespInbox(),
		reqs:  map[string]*pull{}, known: map[context.Context]bool{}, ended: make(chan struct{}),
	}
	if s.id == nil {
		s.id = func(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// InProgressEvery is how often a job in flight sends an in-progress ack: a
// third of the consumer's AckWait (30s when its configuration names none).
func (s *Source) InProgressEvery() time.Duration { return s.every }

// Allowance is how long after a fetch's wait the Source still waits for the
// server to answer its pull request before the fetch ends in silence: half
// the wait, plus 2s, for the round trip and a busy server.
func Allowance(wait time.Duration) time.Duration { return wait/2 + 2*time.Second }

// pullRequest is JetStream's pull request (the body of
// $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>): at most Batch messages,
// the request expiring Expires nanoseconds after the server has it.
type pullRequest struct {
	Batch   int   `json:"batch"`
	Expires int64 `json:"expires,omitempty"`
}

// reply routes an answer to request p: to its waiting Fetch, or, when no
// Fetch waits for it any more, to the strays (a job) or nowhere (a status).
// It runs on p's subscription's goroutine.
func (s *Source) reply(p *pull, m *nats.Msg) {
	status := m.Header.Get("Status")
	if status == "100" { // an idle heartbeat or flow control: not an answer
		return
	}
	isJob := status == "" && strings.HasPrefix(m.Reply, "$JS.ACK.")
	s.mu.Lock()
	open := s.reqs[p.token] == p
	waited := open && !p.abandoned // decided with the request's removal, so abandon sees one or the other
	s.removeLocked(p)
	s.mu.Unlock()
	s.unsubscribe(p)
	if waited {
		p.answer <- m // buffered: the one answer of a batch of 1; the Fetch, or its abandon, takes it
		return
	}
	if !isJob {
		return
	}
	j := s.newJob(m)
	s.mu.Lock()
	draining := s.draining
	if !draining {
		s.strays = append(s.strays, j)
	}
	s.mu.Unlock()
	if draining {
		s.handBackStray(j, "it reached a pull request given up on, after the Source began draining")
		return
	}
	s.log.Info("lameduck: nats: a job reached a pull request given up on; the next fetch returns it", "job", j.id)
}

// handBackStray hands j back for the runner's reason: it never started.
func (s *Source) handBackStray(j *Job, why string) {
	if err := j.handBack(context.Background(), worker.ErrNotStarted, 0); err != nil {
		s.log.Error("lameduck: nats: handing back a job that "+why+" failed", "job", j.id, "error", err.Error())
		return
	}
	s.log.Info("lameduck: nats: job handed back: "+why, "job", j.id)
}

// Fetch asks the consumer for one message, waiting up to wait, and
// returns it as a [*Job]: a job delivered earlier to a request the Source
// gave up on first, if any; otherwise one pull request (batch 1, expiring
// wait after the server has it) and its answer. It returns:
//
//   - the job, its in-progress acks started;
//   - (nil, nil) when the server ended the request with no message: its
//     expiry (408), or a leader change (409): an idle cycle of the loop;
//   - an error wrapping [worker.ErrNoReply] when the server did not answer
//     within wait + [Allowance](wait): the connection or the server went
//     silent. The request stays the Source's: a job it brings later is
//     returned by the next Fetch;
//   - (nil, nil) when ctx ended (the process is exiting): the request
//     stays the Source's, which hands back a job it brings from then on;
//   - an error for any other status (409 "Consumer Deleted", "Exceeded
//     MaxWaiting"), or nats.go's error when the request could not be sent
//     (the connection is closed): a failed fetch, which still counts as a
//     cycle.
//
// On its first call with a given ctx it flushes the connection and calls
// [worker.Consuming]: the server holds the loop's request. Fetch does not
// retry; the loop does.
func (s *Source) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	s.mu.Lock()
	if len(s.strays) > 0 {
		j := s.strays[0]
		s.strays = s.strays[1:]
		s.mu.Unlock()
		return j, nil
	}
	s.seq++
	token := strconv.FormatUint(s.seq, 10)
	p := &pull{token: token, wait: wait, answer: make(chan *nats.Msg, 1), reconnects: s.nc.Stats().Reconnects}
	first := !s.known[ctx]
	s.known[ctx] = true
	s.mu.Unlock()

	// One subscription per request: the server sends a job with the
	// stream's subject, so only the subscription tells which request it
	// answers.
	reply := s.inbox + "." + token
	sub, err := s.nc.Subscribe(reply, func(m *nats.Msg) { s.reply(p, m) })
	if err != nil {
		return nil, fmt.Errorf("lameduck: ldnats: subscribing to a pull request's replies: %w", err)
	}
	p.sub = sub
	s.mu.Lock()
	s.reqs[token] = p
	s.mu.Unlock()
	body, _ := json.Marshal(pullRequest{Batch: 1, Expires: max(wait, time.Millisecond).Nanoseconds()})
	if err := s.nc.PublishRequest(s.next, reply, body); err != nil {
		s.end(p)
		return nil, fmt.Errorf("lameduck: ldnats: sending a pull request to consumer %q: %w", s.consumer, err)
	}
	if first {
		fctx, cancel := context.WithTimeout(ctx, wait+Allowance(wait))
		err := s.nc.FlushWithContext(fctx)
		cancel()
		if err == nil {
			worker.Consuming(ctx)
		}
	}
	t := time.NewTimer(wait + Allowance(wait))
	defer t.Stop()
	select {
	case m := <-p.answer:
		return s.answer(m)
	case <-t.C:
		if m, ok := s.abandon(p); ok {
			return s.answer(m)
		}
		return nil, fmt.Errorf("%w: consumer %q did not answer a pull request of %s within %s more; the request stays open, and a job it brings is run by the next fetch",
			worker.ErrNoReply, s.consumer, wait, Allowance(wait))
	case <-ctx.Done():
		s.mu.Lock()
		s.draining = true // no Fetch follows: a late job goes back at once
		s.mu.Unlock()
		if m, ok := s.abandon(p); ok {
			return s.answer(m)
		}
		return nil, nil
	}
}

// abandon marks the request given up on. If its answer is on its way
// (reply has removed the request), it waits for it and returns it.
func (s *Source) abandon(p *pull) (*nats.Msg, bool) {
	s.mu.Lock()
	if s.reqs[p.token] == p {
		p.abandoned, p.since = true, time.Now()
		s.mu.Unlock()
		return nil, false
	}
	s.mu.Unlock()
	return <-p.answer, true
}

// end removes request p, which the server never got, and its
// subscription.
func (s *Source) end(p *pull) {
	s.mu.Lock()
	s.removeLocked(p)
	s.mu.Unlock()
	s.unsubscribe(p)
}

// removeLocked removes p from the requests the server may still answer.
func (s *Source) removeLocked(p *pull) {
	if s.reqs[p.token] == p {
		delete(s.reqs, p.token)
		close(s.ended)
		s.ended = make(chan struct{})
	}
}

// unsubscribe removes p's subscription.
func (s *Source) unsubscribe(p *pull) {
	if err := p.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		s.log.Warn("lameduck: nats: removing a pull request's subscription failed", "error", err.Error())
	}
}

// answer turns the server's answer to a pull request into Fetch's result.
func (s *Source) answer(m *nats.Msg) (worker.Job, error) {
	switch status := m.Header.Get("Status"); {
	case status == "" && strings.HasPrefix(m.Reply, "$JS.ACK."):
		return s.newJob(m), nil
	case status == "408" || status == "404":
		return nil, nil
	case status == "409" && strings.Contains(strings.ToLower(m.Header.Get("Description")), "leadership change"):
		return nil, nil
	default:
		return nil, fmt.Errorf("lameduck: ldnats: consumer %q ended a pull request: %s %s", s.consumer, status, m.Header.Get("Description"))
	}
}

// Drain hands back every job that reached a request the Source had given
// up on, then waits until the server can send nothing more to a request no
// Fetch waits for: each one given up on either ends (its expiry) or passes
// its wait plus twice the allowance since it was given up on. A request a
// Fetch still waits for (another worker's, on a shared Source) is that
// Fetch's, and a request given up on whose connection has broken since
// (the server dropped it with the connection) is not waited for either. A
// job that arrives meanwhile is handed back at once.
//
// It returns nil, or, when ctx ends first or a silent request never ended,
// an error naming how many requests may still bring a job and what the
// server does with one: it redelivers it after the consumer's AckWait,
// counting a delivery (the subscription is kept until the connection
// closes, so a job that arrives later is still handed back).
//
// The worker calls it once every loop on the Source has returned, and at
// the end of the teardown's hook share when a handler overran. Fetch still
// works after it (a Source shared by two workers), but from then on a job
// that reaches a request given up on is handed back at once rather than
// kept.
func (s *Source) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	strays := s.strays
	s.strays = nil
	s.mu.Unlock()
	for _, j := range strays {
		s.handBackStray(j, "it reached a pull request given up on, and the runner is draining")
	}
	for {
		s.mu.Lock()
		var due time.Time
		open := 0
		reconnects := s.nc.Stats().Reconnects
		for _, p := range s.reqs {
			if !p.abandoned {
				// A Fetch waits for it and takes its answer: another
				// worker's loop on a shared Source, or one the runner
				// has left behind at exit. Not Drain's to wait for.
				continue
			}
			if p.reconnects != reconnects {
				// Sent on a connection that has broken since: the server
				// dropped it with the connection's interest, and a job it
				// had sent into it was lost in transit (redelivered after
				// the AckWait). Its subscription stays, and hands back a
				// job that still arrives.
				continue
			}
			open++
			end := p.since.Add(p.wait + 2*Allowance(p.wait))
			if end.After(due) {
				due = end
			}
		}
		ended := s.ended
		s.mu.Unlock()
		if open == 0 {
			return nil
		}
		left := time.Until(due)
		if left <= 0 {
			return fmt.Errorf("lameduck: ldnats: %d pull request(s) to consumer %q went unanswered (silence); should the server still deliver a job to one, the job is handed back while the connection lives, else the server redelivers it after the consumer's AckWait %s, counting a delivery",
				open, s.consumer, s.ackWait)
		}
		t := time.NewTimer(left)
		select {
		case <-ended:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lameduck: ldnats: draining consumer %q: %d pull request(s) still open at the end of the teardown's share (%w); a job the server delivers to one is handed back while the connection lives, else redelivered after the consumer's AckWait %s",
				s.consumer, open, ctx.Err(), s.ackWait)
		}
	}
}

// Job is one message delivered by a [Source]: a [worker.Job] and a
// [worker.Delivered]. Ack acknowledges it, HandBack returns it to the
// stream; a consume loop calls exactly one of them, once. Until then the
// job sends in-progress acks (see [Source]); code that uses a Source
// outside a worker must settle every job, or its in-progress acks go on.
//
// Its methods are safe for concurrent use.
type Job struct {
	src  *Source
	raw  *nats.Msg
	msg  jetstream.Msg
	id   string
	stop chan struct{} // closed when the job is settled
	kept chan struct{} // closed when the in-progress acks have stopped
	once sync.Once     // closes stop
}

// newJob makes the job of a delivered message and starts its in-progress
// acks. It calls SourceConfig.ID: never with s.mu held.
func (s *Source) newJob(m *nats.Msg) *Job {
	j := &Job{src: s, raw: m, msg: message{m: m, nc: s.nc}, stop: make(chan struct{}), kept: make(chan struct{})}
	j.id = s.id(j.msg)
	if j.id == "" {
		if md, err := j.msg.Metadata(); err == nil {
			j.id = "seq-" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
	}
	go j.keepInProgress()
	return j
}

// keepInProgress sends an in-progress ack every s.every until the job is
// settled or the connection is closed.
func (j *Job) keepInProgress() {
	defer close(j.kept)
	tick := time.NewTicker(j.src.every)
	defer tick.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-tick.C:
			if err := j.msg.InProgress(); errors.Is(err, nats.ErrConnectionClosed) {
				return
			} else if err != nil {
				j.src.log.Warn("lameduck: nats: in-progress ack failed; the job may be redelivered after the consumer's AckWait", "job", j.id, "error", err.Error())
			}
		}
	}
}

// settle stops the in-progress acks and waits until none can follow.
func (j *Job) settle() {
	j.once.Do(func() { close(j.stop) })
	<-j.kept
}

// ID is the job's name (see SourceConfig.ID).
func (j *Job) ID() string { return j.id }

// Msg is the delivered message: its data, headers and metadata (the
// delivery count, the stream sequence). Settle the job through Ack or
// HandBack, not through the message.
func (j *Job) Msg() jetstream.Msg { return j.msg }

// Delivery is the number of times the consumer has delivered the message,
// this delivery included (its NumDelivered); 1 when the metadata cannot be
// read.
func (j *Job) Delivery() int {
	md, err := j.msg.Metadata()
	if err != nil || md.NumDelivered == 0 {
		return 1
	}
	return int(min(md.NumDelivered, 1<<30))
}

// LastDelivery reports whether the consumer will not deliver the message
// again after a NAK: the consumer has a MaxDeliver and this delivery is
// its last. HandBack then re-publishes a job the runner hands back (see
// HandBack); a handler may use it to record a job about to fail for good.
func (j *Job) LastDelivery() bool {
	if j.src.maxDeliver <= 0 {
		return false
	}
	md, err := j.msg.Metadata()
	return err == nil && md.NumDelivered >= uint64(j.src.maxDeliver)
}

// Ack stops the job's in-progress acks, acknowledges the message and waits
// for the server's confirmation (jetstream.Msg.DoubleAck), bounded by ctx
// and by 5s, so a job reported done is not delivered again. It returns
// nats.go's error when the server did not confirm; the server then
// redelivers the job after its AckWait (the job runs twice: at least once).
func (j *Job) Ack(ctx context.Context) error {
	j.settle()
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("lameduck: nats: acknowledging job %s: %w; unless the ack reached the server, it redelivers the job after the consumer's AckWait %s", j.id, err, j.src.ackWait)
	}
	return nil
}

// HandBack stops the job's in-progress acks and returns the job to the
// stream, waiting until the server has it, so that a process that exits
// next cannot lose it (docs/runners.md, "Hand-backs and delivery limits").
// Each round trip is bounded by ctx and by 5s.
//
//   - The job's own failure ([worker.HandBackCause] nil), or a runner's
//     reason before the job's last delivery: a NAK, with delay when it is
//     positive (jetstream.Msg.NakWithDelay), then a flush of the
//     connection (a NAK has no reply; the flush's round trip comes after
//     it). A NAK counts as a delivery: a job that keeps failing reaches
//     the consumer's MaxDeliver, and the server stops delivering it and
//     publishes its max-deliveries advisory, the hook of a dead-letter
//     policy.
//   - A runner's reason at the job's last delivery ([Job.LastDelivery]):
//     a NAK would strand a job that never failed, so a copy is published
//     to the stream and confirmed by the server (its PubAck names the
//     consumer's stream), and then the original is acknowledged. The copy
//     has the original's data and headers, except the Nats-* headers the
//     server acts on at publish time (Nats-Expected-*, Nats-Rollup,
//     Nats-Msg-Id and the rest; Nats-TTL is kept): it gets a fresh
//     Nats-Msg-Id, the original's or the job's ID followed by
//     ".requeued-from-<sequence>", so the stream's duplicate window does
//     not drop it, and the headers [HeaderRequeuedFrom] and
//     [HeaderRequeueCause]. It goes to SourceConfig.RequeueSubject's
//     subject, by default one the stream captures as the stored subject
//     (see SourceConfig). The copy starts with a fresh delivery count and
//     at the back of the queue, delivered at once whatever the delay
//     asked. Should the acknowledgement fail after the copy is stored,
//     the job exists twice (at least once, never lost); the error says
//     so. Should no subject reach the stream, or the publish fail, the
//     original is left unacknowledged, and the error says what the server
//     does with it: nothing more (MaxDeliver reached; it stays in the
//     stream and the max-deliveries advisory names it).
func (j *Job) HandBack(ctx context.Context, delay time.Duration) error {
	return j.handBack(ctx, worker.HandBackCause(ctx), delay)
}

// handBack is HandBack for cause (nil: the job's own failure).
func (j *Job) handBack(ctx context.Context, cause error, delay time.Duration) error {
	j.settle()
	if cause != nil && j.LastDelivery() {
		return j.requeue(ctx, cause)
	}
	var err error
	if delay > 0 {
		err = j.msg.NakWithDelay(delay)
	} else {
		err = j.msg.Nak()
	}
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, settleTimeout)
		defer cancel()
		err = j.src.nc.FlushWithContext(fctx)
	}
	if err != nil {
		return fmt.Errorf("lameduck: nats: handing back job %s: %w; unless the NAK reached the server, it redelivers the job after the consumer's AckWait %s", j.id, err, j.src.ackWait)
	}
	return nil
}

// requeue publishes a copy of the message and acknowledges the original.
func (j *Job) requeue(ctx context.Context, cause error) error {
	md, err := j.msg.Metadata()
	if err != nil {
		return err
	}
	lost := fmt.Sprintf("lameduck: nats: job %s at its last delivery (%d of MaxDeliver %d), handed back for the runner's reason (%v): ",
		j.id, md.NumDelivered, j.src.maxDeliver, cause)
	stays := fmt.Sprintf("; the original is not acknowledged, and the consumer will not deliver it again: it stays in stream %s at sequence %d, named by the max-deliveries advisory ($JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s)",
		j.src.stream, md.Sequence.Stream, j.src.stream, j.src.consumer)
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	subject, err := j.src.requeueSubject(ctx, j.msg)
	if err != nil {
		return errors.New(lost + err.Error() + stays)
	}
	out := nats.NewMsg(subject)
	out.Data = j.msg.Data()
	for k, v := range j.msg.Headers() {
		if strings.HasPrefix(strings.ToLower(k), "nats-") && !strings.EqualFold(k, "Nats-TTL") {
			continue // the server acts on these at publish time: a check, a rollup, a batch, a schedule
		}
		out.Header[k] = append([]string(nil), v...)
	}
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	id := j.msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		id = j.id
	}
	out.Header.Set(jetstream.MsgIDHeader, id+".requeued-from-"+seq)
	out.Header.Set(HeaderRequeuedFrom, seq)
	out.Header.Set(HeaderRequeueCause, cause.Error())
	ack, err := j.src.js.PublishMsg(ctx, out)
	if err != nil {
		return fmt.Errorf("%spublishing a copy to %q: %w%s", lost, subject, err, stays)
	}
	if ack.Stream != j.src.stream {
		return fmt.Errorf("%sthe copy published to %q was stored by stream %s, not %s (sequence %d there)%s", lost, subject, ack.Stream, j.src.stream, ack.Sequence, stays)
	}
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("lameduck: nats: job %s at its last delivery: its copy is stored (stream %s, sequence %d), but acknowledging the original failed (the job may run twice: at least once): %w",
			j.id, ack.Stream, ack.Sequence, err)
	}
	return nil
}

// requeueSubject is the subject a copy of m goes to (see
// SourceConfig.RequeueSubject).
func (s *Source) requeueSubject(ctx context.Context, m jetstream.Msg) (string, error) {
	if s.requeueTo != nil {
		if subj := s.requeueTo(m); subj != "" {
			return subj, nil
		}
		return "", errors.New("SourceConfig.RequeueSubject named no subject")
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return "", fmt.Errorf("reading stream %s's subjects: %w", s.stream, err)
	}
	cfg := st.CachedInfo().Config
	stored := m.Subject()
	if tr := cfg.SubjectTransform; tr != nil && tr.Destination != "" {
		if subj, ok := reverseTransform(tr.Source, tr.Destination, stored); ok && captured(cfg.Subjects, subj) {
			return subj, nil
		}
		return "", fmt.Errorf("stream %s stores %q through the subject transform %q → %q, and no subject of the stream maps onto it; set ldnats.SourceConfig.RequeueSubject to the subject producers publish such a job to",
			s.stream, stored, tr.Source, tr.Destination)
	}
	if captured(cfg.Subjects, stored) {
		return stored, nil
	}
	return "", fmt.Errorf("no subject of stream %s (%q) captures the stored subject %q; set ldnats.SourceConfig.RequeueSubject to the subject producers publish such a job to",
		s.stream, cfg.Subjects, stored)
}

// captured reports whether one of the filters matches subject (NATS
// wildcards: * one token, > the rest).
func captured(filters []string, subject string) bool {
	for _, f := range filters {
		if match(strings.Split(f, "."), strings.Split(subject, ".")) {
			return true
		}
	}
	return false
}

func match(f, s []string) bool {
	for i, t := range f {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || (t != "*" && t != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

// reverseTransform finds the subject that the transform src → dst maps
// onto stored, for transforms made of literal tokens, * and > (matched in
// order) and {{wildcard(n)}} or $n in dst. ok is false for any other
// shape.
func reverseTransform(src, dst, stored string) (string, bool) {
	if src == "" {
		src = ">"
	}
	st, dt, ss := strings.Split(src, "."), strings.Split(dst, "."), strings.Split(stored, ".")
	// The wildcards of src, in order: their positions; and which wildcard
	// each token of dst takes.
	var wild []int
	for i, t := range st {
		if t == "*" || t == ">" {
			wild = append(wild, i)
		}
	}
	vals := make([]string, len(wild))
	set := make([]bool, len(wild))
	next := 0
	for i, t := range dt {
		n := -1
		switch {
		case t == "*" || t == ">":
			n, next = next, next+1
		case strings.HasPrefix(t, "$"):
			k, err := strconv.Atoi(t[1:])
			if err != nil {
				return "", false
			}
			n = k - 1
		case strings.HasPrefix(t, "{{") && strings.HasSuffix(t, "}}"):
			inner := strings.ReplaceAll(strings.ToLower(t[2:len(t)-2]), " ", "")
			if !strings.HasPrefix(inner, "wildcard(") || !strings.HasSuffix(inner, ")") {
				return "", false
			}
			k, err := strconv.Atoi(inner[len("wildcard(") : len(inner)-1])
			if err != nil {
				return "", false
			}
			n = k - 1
		}
		if n < 0 {
			if i >= len(ss) || ss[i] != t {
				return "", false
			}
			continue
		}
		if n >= len(wild) || i >= len(ss) {
			return "", false
		}
		v := ss[i]
		if t == ">" || st[wild[n]] == ">" {
			if i != len(dt)-1 {
				return "", false
			}
			v = strings.Join(ss[i:], ".")
		}
		if set[n] && vals[n] != v {
			return "", false
		}
		vals[n], set[n] = v, true
	}
	if len(dt) != len(ss) && dt[len(dt)-1] != ">" && !strings.HasSuffix(dst, "}}") {
		return "", false
	}
	out := make([]string, 0, len(st))
	for i, t := range st {
		if t == "*" || t == ">" {
			n := indexOf(wild, i)
			if !set[n] {
				return "", false
			}
			out = append(out, vals[n])
			continue
		}
		out = append(out, t)
	}
	return strings.Join(out, "."), true
}

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// message is a [jetstream.Msg] over a message delivered to the Source's
// own subscription, acknowledged through nats.go's JetStream message
// methods (which read the ack subject, $JS.ACK.…).
type message struct {
	m  *nats.Msg
	nc *nats.Conn
}

func (m message) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.m.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered, NumPending: md.NumPending, Timestamp: md.Timestamp,
		Stream: md.Stream, Consumer: md.Consumer, Domain: md.Domain,
	}, nil
}
func (m message) Data() []byte                        { return m.m.Data }
func (m message) Headers() nats.Header                { return m.m.Header }
func (m message) Subject() string                     { return m.m.Subject }
func (m message) Reply() string                       { return m.m.Reply }
func (m message) Ack() error                          { return m.m.Ack() }
func (m message) DoubleAck(ctx context.Context) error { return m.m.AckSync(nats.Context(ctx)) }
func (m message) Nak() error                          { return m.m.Nak() }
func (m message) NakWithDelay(d time.Duration) error  { return m.m.NakWithDelay(d) }
func (m message) InProgress() error                   { return m.m.InProgress() }
func (m message) Term() error                         { return m.m.Term() }
func (m message) TermWithReason(reason string) error {
	return m.nc.Publish(m.m.Reply, []byte("+TERM "+reason))
}

// apiPrefix returns the subject prefix of js's JetStream API, ending in a
// dot: its domain's ("$JS.<domain>.API."), its APIPrefix, or the default
// "$JS.API.".
func apiPrefix(js jetstream.JetStream) string {
	prefix := js.Options().APIPrefix
	if d := js.Options().Domain; d != "" {
		prefix = "$JS." + d + ".API."
	}
	if prefix == "" {
		prefix = "$JS.API."
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	return prefix
}

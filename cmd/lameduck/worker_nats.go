package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The demo worker's JetStream names, for the queue named q ("demo"): stream
// LAMEDUCK_<q>, subject lameduck.<q>.jobs, durable consumer <q>-worker, and
// keys <q>.<runner id> of the epochs bucket.
func demoStream(q string) string   { return "LAMEDUCK_" + q }
func demoSubject(q string) string  { return "lameduck." + q + ".jobs" }
func demoConsumer(q string) string { return q + "-worker" }

const (
	epochBucket = "lameduck_epochs"
	// embeddedStart bounds how long the embedded server may take to accept
	// connections.
	embeddedStart = 10 * time.Second
)

// checkQueue refuses a queue name that JetStream could not use in every one
// of those names.
func checkQueue(q string) error {
	if q == "" || strings.Trim(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return fmt.Errorf("--queue=%q: use letters, digits, '_' and '-' only, such as \"demo\"", q)
	}
	return nil
}

// demoJob is the body of one job message.
type demoJob struct {
	ID string `json:"id"`
	D  string `json:"d"` // how long it runs, a Go duration
}

// startEmbedded starts a NATS server with JetStream inside the process,
// listening on addr and storing in dir, and returns it once it accepts
// connections.
func startEmbedded(addr, dir string) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--embedded-addr=%q: %w; use HOST:PORT such as 127.0.0.1:4223", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--embedded-addr=%q: port %q is not a number", addr, portStr)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--store=%q: %w", dir, err)
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "lameduck-demo-worker",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true, // the Lifecycle owns SIGTERM
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(embeddedStart) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS server on %s did not accept connections within %s (is the port taken? use --embedded-addr or --nats)", addr, embeddedStart)
	}
	return ns, nil
}

// connect dials url and ensures the stream of queue q exists.
func connect(ctx context.Context, url, q string) (*nats.Conn, jetstream.JetStream, jetstream.Stream, error) {
	nc, err := nats.Connect(url, nats.Name("lameduck demo-worker"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:      demoStream(q),
		Subjects:  []string{demoSubject(q)},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	})
	if err != nil {
		nc.Close()
		hint := "is JetStream enabled on that server?"
		if strings.Contains(err.Error(), "subjects overlap") {
			// A stream of another demo version (or another program) already
			// takes the subject, in this server or the embedded one's store.
			hint = "another stream there already takes subject " + demoSubject(q) +
				"; use another --queue, start the embedded server on a fresh --store DIR, or delete that stream"
		}
		return nil, nil, nil, fmt.Errorf("JetStream stream %s at %s: %w (%s)", demoStream(q), url, err, hint)
	}
	return nc, js, st, nil
}

// natsSource is a worker.Source on a JetStream pull consumer.
type natsSource struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	cons       jetstream.Consumer
	maxDeliver int // the consumer's MaxDeliver; ≤ 0: unlimited
	stallAfter int // when > 0: the consumer stops fetching after this many fetches (a wedged consumer, for tests)
	metrics    *workerMetrics

	mu      sync.Mutex
	fetches int // guarded by mu
}

// fetchHeartbeat is the idle heartbeat a fetch of wait asks the server
// for: a third of wait, at most 5s (nats.go's own default for long pulls);
// none under 150ms of wait. Two heartbeats missed end the fetch in silence
// (worker.ErrNoReply), before the fetch's own deadline.
func fetchHeartbeat(wait time.Duration) time.Duration {
	if wait < 150*time.Millisecond {
		return 0
	}
	return min(wait/3, 5*time.Second)
}

// fetchDeadline is the deadline of a fetch's context such that nats.go's
// pull request expires on the server after wait (nats.go gives the server
// the context's time left less a tenth of it, at most 1s).
func fetchDeadline(wait time.Duration) time.Duration {
	if wait >= 9*time.Second {
		return wait + time.Second
	}
	return wait * 10 / 9
}

// Fetch asks for one message, waiting up to wait, with idle heartbeats
// (fetchHeartbeat): a fetch that ends on the server's expiry of the request
// (heartbeats came meanwhile) is an idle cycle, (nil, nil); one that ends
// because two heartbeats were missed is silence, an error wrapping
// worker.ErrNoReply: the server or the connection stopped answering, and
// liveness must see it (docs/runners.md, "Liveness").
func (s *natsSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
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
	fctx, cancel := context.WithTimeout(ctx, fetchDeadline(wait))
	defer cancel()
	opts := []jetstream.FetchOpt{jetstream.FetchContext(fctx)}
	hb := fetchHeartbeat(wait)
	if hb > 0 {
		opts = append(opts, jetstream.FetchHeartbeat(hb))
	}
	batch, err := s.cons.Fetch(1, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, err
	}
	for msg := range batch.Messages() {
		j := newNatsJob(s.nc, msg)
		j.js, j.maxDeliver, j.metrics = s.js, s.maxDeliver, s.metrics
		return j, nil
	}
	switch err := batch.Error(); {
	case err == nil || ctx.Err() != nil:
		return nil, nil
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		return nil, fmt.Errorf("%w: no heartbeat for %s, and the server sends one every %s while a fetch waits (%v)", worker.ErrNoReply, 2*hb, hb, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		// The request's end came late, heartbeats having come: idle.
		return nil, nil
	default:
		return nil, err
	}
}

// natsJob is one delivered message.
type natsJob struct {
	metrics    *workerMetrics
	nc         *nats.Conn
	js         jetstream.JetStream
	msg        jetstream.Msg
	maxDeliver int // the consumer's MaxDeliver; ≤ 0: unlimited
	job        demoJob
	bad        error // the body could not be read
}

func newNatsJob(nc *nats.Conn, msg jetstream.Msg) *natsJob {
	j := &natsJob{nc: nc, msg: msg}
	if err := json.Unmarshal(msg.Data(), &j.job); err != nil || j.job.ID == "" {
		j.bad = fmt.Errorf("not a demo job: %q", msg.Data())
	}
	if j.job.ID == "" {
		if md, err := msg.Metadata(); err == nil {
			j.job.ID = "seq-" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
	}
	return j
}

func (j *natsJob) ID() string { return j.job.ID }

// Ack acknowledges and waits for the server's confirmation, so a job
// reported done is not delivered again.
func (j *natsJob) Ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := j.msg.DoubleAck(ctx)
	if err == nil && j.metrics != nil {
		j.metrics.done.Inc()
	}
	return err
}

// Headers of a job the demo worker re-publishes (see HandBack).
const (
	// headerRequeuedFrom is the stream sequence of the message the copy
	// replaces.
	headerRequeuedFrom = "Lameduck-Requeued-From"
	// headerRequeueCause is the runner's reason (worker.HandBackCause).
	headerRequeueCause = "Lameduck-Requeue-Cause"
)

// HandBack returns the job to the queue, and waits until the server has it,
// so that a process that exits next cannot lose it (docs/runners.md,
// "Hand-backs and delivery limits"):
//
//   - the job's own failure (worker.HandBackCause nil), or a runner's
//     reason before the job's last delivery: a NAK, with the delay asked
//     for, then a flush (a NAK has no reply; the flush's round trip comes
//     after it). A NAK counts as a delivery: a job that keeps failing
//     reaches the consumer's MaxDeliver, and the server stops delivering it
//     and publishes its max-deliveries advisory, the hook of a dead-letter
//     policy;
//   - a runner's reason at the job's last delivery (MaxDeliver reached): a
//     NAK would strand a job that never failed, so a copy is published to
//     the stream (same subject, data and headers; a fresh Nats-Msg-Id so
//     the stream's duplicate window does not drop it; the headers
//     Lameduck-Requeued-From and Lameduck-Requeue-Cause), confirmed by the
//     server, and then the original is acknowledged. The copy starts with a
//     fresh delivery count and at the back of the queue, delivered at once
//     whatever the delay asked. Should the acknowledgement fail after the
//     copy is stored, the job exists twice (at-least-once, never lost).
func (j *natsJob) HandBack(ctx context.Context, delay time.Duration) error {
	if cause := worker.HandBackCause(ctx); cause != nil && j.lastDelivery() {
		return j.requeue(ctx, cause)
	}
	var err error
	if delay > 0 {
		err = j.msg.NakWithDelay(delay)
	} else {
		err = j.msg.Nak()
	}
	if err != nil {
		return err
	}
	if j.metrics != nil {
		j.metrics.back.WithLabelValues(strconv.FormatBool(delay > 0)).Inc()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return j.nc.FlushWithContext(ctx)
}

// lastDelivery reports whether the consumer will not deliver the message
// again after a NAK.
func (j *natsJob) lastDelivery() bool {
	if j.maxDeliver <= 0 || j.js == nil {
		return false
	}
	md, err := j.msg.Metadata()
	return err == nil && md.NumDelivered >= uint64(j.maxDeliver)
}

// requeue publishes a copy of the message and acknowledges the original.
func (j *natsJob) requeue(ctx context.Context, cause error) error {
	md, err := j.msg.Metadata()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := nats.NewMsg(j.msg.Subject())
	out.Data = j.msg.Data()
	for k, v := range j.msg.Headers() {
		out.Header[k] = append([]string(nil), v...)
	}
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	id := j.msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		id = j.job.ID
	}
	out.Header.Set(jetstream.MsgIDHeader, id+".requeued-from-"+seq)
	out.Header.Set(headerRequeuedFrom, seq)
	out.Header.Set(headerRequeueCause, cause.Error())
	if _, err := j.js.PublishMsg(ctx, out); err != nil {
		return fmt.Errorf("last delivery (%d of MaxDeliver %d): publishing a copy: %w", md.NumDelivered, j.maxDeliver, err)
	}
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("last delivery (%d of MaxDeliver %d): copy published, but acknowledging the original failed (the job may run twice): %w",
			md.NumDelivered, j.maxDeliver, err)
	}
	if j.metrics != nil {
		j.metrics.requeued.Inc()
	}
	return nil
}

// kvEpochs is a worker.EpochSource on a JetStream key-value bucket that
// counts only the runners alive now (docs/runners.md, "Rollout epochs").
// Each runner owns one key, <queue>.<random id>, holding its epoch and its
// poll interval, and puts it again at every poll. An entry is stale when it
// was last put more than staleFactor of its runner's polls before this
// runner's own put, both timestamps the server's (no clock skew between
// pods): a runner killed without a drain stops counting after three polls,
// and the first runner to notice deletes its key. A runner deletes its own
// key as it begins to drain (it takes no new job, so it must supersede no
// one) and again at exit. The newest epoch is the max over fresh entries, so
// after a rollback it falls back to the older fleet's.
type kvEpochs struct {
	kv       jetstream.KeyValue
	queue    string
	key      string        // this runner's: <queue>.<id>
	poll     time.Duration // this runner's poll interval, published with its epoch
	draining func() bool   // true from the signal on

	mu      sync.Mutex
	last    uint64 // guarded by mu: the last answer
	retired bool   // guarded by mu: the key is deleted for good
}

// staleFactor is how many of its polls a runner may miss before its entry
// stops counting.
const staleFactor = 3

// epochEntry is the JSON value of a runner's key: {"epoch":2,"poll":"10s"}.
type epochEntry struct {
	Epoch uint64 `json:"epoch"`
	Poll  string `json:"poll"`
}

func newKVEpochs(ctx context.Context, js jetstream.JetStream, queue string, poll time.Duration, draining func() bool) (*kvEpochs, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: epochBucket, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("JetStream key-value bucket %s: %w", epochBucket, err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	return &kvEpochs{kv: kv, queue: queue, key: queue + "." + hex.EncodeToString(id[:]), poll: poll, draining: draining}, nil
}

// Newest puts this runner's entry and returns the newest epoch among the
// fresh entries of its queue (at least mine). From the signal on it deletes
// the entry instead and returns its last answer.
func (k *kvEpochs) Newest(ctx context.Context, mine uint64) (uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.retired || k.draining() {
		return max(k.last, mine), k.retireLocked(ctx)
	}
	val, err := json.Marshal(epochEntry{Epoch: mine, Poll: k.poll.String()})
	if err != nil {
		return 0, err
	}
	if _, err := k.kv.Put(ctx, k.key, val); err != nil {
		return 0, err
	}
	wt, err := k.kv.Watch(ctx, k.queue+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return 0, err
	}
	defer func() { _ = wt.Stop() }()
	var entries []jetstream.KeyValueEntry
	var now time.Time // the server's time of this runner's put
	for done := false; !done; {
		select {
		case e := <-wt.Updates():
			if e == nil {
				done = true
				break
			}
			entries = append(entries, e)
			if e.Key() == k.key {
				now = e.Created()
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	newest := mine
	for _, e := range entries {
		var v epochEntry
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			return 0, fmt.Errorf("key %s/%s holds %q, not an epoch entry", epochBucket, e.Key(), e.Value())
		}
		poll, err := time.ParseDuration(v.Poll)
		if err != nil || poll <= 0 {
			return 0, fmt.Errorf("key %s/%s holds poll %q, not a positive duration", epochBucket, e.Key(), v.Poll)
		}
		if !now.IsZero() && now.Sub(e.Created()) > staleFactor*poll {
			_ = k.kv.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision())) // unless it was put again meanwhile
			continue
		}
		newest = max(newest, v.Epoch)
	}
	k.last = newest
	return newest, nil
}

// retire deletes this runner's key for good: at exit, so the runners left
// stop counting it at once.
func (k *kvEpochs) retire(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.retireLocked(ctx)
}

func (k *kvEpochs) retireLocked(ctx context.Context) error {
	if k.retired {
		return nil
	}
	if err := k.kv.Delete(ctx, k.key); err != nil {
		return fmt.Errorf("delete epoch key %s/%s: %w", epochBucket, k.key, err)
	}
	k.retired = true
	return nil
}

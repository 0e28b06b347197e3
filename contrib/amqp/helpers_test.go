package ldamqp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
)

// fixture is a work queue (and its dead-letter queue) of the test's own on
// the shared broker, deleted with its wait queues when the test ends.
type fixture struct {
	t     *testing.T
	url   string
	conn  *amqp.Connection // the test's own: publishes and counts
	ch    *amqp.Channel    // in confirm mode
	q     ldamqp.Queue
	waits []string // wait queues to delete at the end
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// proxied returns a Proxy of the test's own to the fixture's broker and
// the fixture's URL through it.
func (f *fixture) proxied() (*testsupport.Proxy, string) {
	f.t.Helper()
	u, err := url.Parse(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	proxy := testsupport.NewProxy(f.t, u.Host)
	via := *u
	via.Host = proxy.Addr()
	return proxy, via.String()
}

// newFixture declares the quorum queue q (its MaxDeliveries and
// DeliveryLimit; the name is the test's) and a dead-letter queue.
func newFixture(t *testing.T, q ldamqp.Queue) *fixture {
	t.Helper()
	u := live(t)
	f := &fixture{t: t, url: u.String()}
	f.conn = f.dial()
	base := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(base) > 60 {
		base = base[:60]
	}
	name := fmt.Sprintf("lameduck-test-%s-%d", base, time.Now().UnixNano())
	q.Name, q.DeadLetterQueue = name, name+".dlq"
	f.q = q
	t.Cleanup(f.cleanup)
	ch, err := f.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ldamqp.DeclareQueue(ch, f.q); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	f.ch = ch
	return f
}

// cleanup deletes the test's queues on a channel of its own.
func (f *fixture) cleanup() {
	ch, err := f.conn.Channel()
	if err != nil {
		f.t.Logf("cleanup: %v", err)
		return
	}
	for _, q := range append([]string{f.q.Name, f.q.DeadLetterQueue}, f.waits...) {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			f.t.Logf("cleanup: deleting %q: %v", q, err)
			if ch, err = f.conn.Channel(); err != nil {
				return
			}
		}
	}
}

// dial opens a connection to the broker, closed when the test ends.
func (f *fixture) dial() *amqp.Connection {
	f.t.Helper()
	return dialURL(f.t, f.url)
}

func dialURL(t testing.TB, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// wait returns the name of the wait queue of delay, deleted when the test
// ends.
func (f *fixture) wait(delay time.Duration) string {
	name, _ := f.q.WaitQueue(delay)
	f.waits = append(f.waits, name)
	return name
}

// publish publishes one message per ID (its MessageId and body), each
// confirmed.
func (f *fixture) publish(ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		dc, err := f.ch.PublishWithDeferredConfirm("", f.q.Name, true, false,
			amqp.Publishing{MessageId: id, Body: []byte("body of " + id), DeliveryMode: amqp.Persistent, ContentType: "text/plain"})
		if err != nil {
			f.t.Fatal(err)
		}
		if !dc.Wait() {
			f.t.Fatalf("the broker refused %s", id)
		}
	}
}

// state is a queue's ready messages and consumers.
func (f *fixture) state(queue string) (ready, consumers int) {
	f.t.Helper()
	q, err := f.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		f.t.Fatalf("queue %q: %v", queue, err)
	}
	return q.Messages, q.Consumers
}

func (f *fixture) ready(queue string) int {
	f.t.Helper()
	n, _ := f.state(queue)
	return n
}

// await polls cond until it holds, or fails the test after a minute: what
// it waits for is the broker's asynchronous work (a dead-letter, a
// requeue), which takes milliseconds.
func (f *fixture) await(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitReady waits until queue holds n ready messages, or fails the test
// after a minute.
func (f *fixture) awaitReady(queue string, n int) {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for got := f.ready(queue); got != n; got = f.ready(queue) {
		if time.Now().After(deadline) {
			f.t.Fatalf("waited a minute for %d ready message(s) in %q; it holds %d", n, queue, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// source returns a Source for the fixture's queue on conn, closed when
// the test ends.
func (f *fixture) source(conn *amqp.Connection, cfg ldamqp.SourceConfig) *ldamqp.Source {
	f.t.Helper()
	if cfg.Queue.Name == "" {
		cfg.Queue = f.q
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	src, err := ldamqp.NewSource(conn, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { src.Close() })
	return src
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fetch fetches one job, failing the test when none comes within wait.
func fetch(t testing.TB, src *ldamqp.Source, wait time.Duration) *ldamqp.Job {
	t.Helper()
	j, err := src.Fetch(context.Background(), wait)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if j == nil {
		t.Fatalf("Fetch: no job within %s", wait)
	}
	return j.(*ldamqp.Job)
}

// header reads a header of j's delivery, as a string.
func header(j *ldamqp.Job, key string) string {
	v, ok := j.Msg().Headers[key]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

// testConfig is a worker's Lifecycle for a test: quiet, probes on a free
// port, no signal handling, a teardown of 1.5s.
func testConfig() lameduck.Config {
	return lameduck.Config{Logger: quiet(), ProbeAddr: "127.0.0.1:0", IgnoreSignals: true, ShutdownTeardown: 1500 * time.Millisecond}
}

// runWorker runs a worker with one loop of handle on src, in drain mode
// mode, with the failure backoff given (0: the default), and returns it
// and Run's result.
func runWorker(t *testing.T, src worker.Source, mode string, backoff time.Duration, handle func(context.Context, worker.Job) error) (*worker.Worker, <-chan error) {
	t.Helper()
	t.Setenv("LAMEDUCK_DRAIN_MODE", mode)
	w, err := worker.New(worker.Config{
		Lifecycle: lameduck.Config{
			Logger:           quiet(),
			ProbeAddr:        "127.0.0.1:0",
			IgnoreSignals:    true,
			ShutdownTeardown: 10 * time.Second,
		},
		FailureBackoff:    backoff,
		FailureBackoffMax: backoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddLoop(worker.Loop{Name: "jobs", Source: src, FetchWait: 200 * time.Millisecond, Handle: handle}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background()) }()
	return w, ran
}

// stop drains w and returns Run's error.
func stop(t *testing.T, w *worker.Worker, ran <-chan error) error {
	t.Helper()
	w.Lifecycle().BeginShutdown("test")
	return testsupport.Recv(t, ran, "the worker's Run")
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	ldnats "github.com/lameduck/lameduck/contrib/nats"
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

// embeddedStart bounds how long the embedded server may take to accept
// connections.
const embeddedStart = 10 * time.Second

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

// demoSource is the demo worker's worker.Source: ldnats.Source, counting
// settled jobs in the metrics, and wedged after stallAfter fetches when
// that is positive (a stalled consumer, for tests).
type demoSource struct {
	src        *ldnats.Source
	stallAfter int
	metrics    *workerMetrics

	mu      sync.Mutex
	fetches int // guarded by mu
}

// Fetch is ldnats.Source.Fetch, its job a *countedJob; past stallAfter
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
	j, err := s.src.Fetch(ctx, wait)
	if j == nil || err != nil {
		return nil, err
	}
	return &countedJob{Job: j.(*ldnats.Job), metrics: s.metrics}, nil
}

// countedJob is an ldnats.Job whose settlements the metrics count.
type countedJob struct {
	*ldnats.Job
	metrics *workerMetrics
}

func (j *countedJob) Ack(ctx context.Context) error {
	err := j.Job.Ack(ctx)
	if err == nil && j.metrics != nil {
		j.metrics.done.Inc()
	}
	return err
}

// HandBack is ldnats.Job.HandBack, counted as a re-published copy when the
// runner hands the job back at its last delivery, as a NAK otherwise.
func (j *countedJob) HandBack(ctx context.Context, delay time.Duration) error {
	requeue := worker.HandBackCause(ctx) != nil && j.LastDelivery()
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

// demoJobID names a job by its body's id, as enqueue gives it.
func demoJobID(msg jetstream.Msg) string {
	var b demoJob
	_ = json.Unmarshal(msg.Data(), &b)
	return b.ID
}

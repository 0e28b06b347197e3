package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The demo worker's JetStream names, for the queue named q (--name, "demo"):
// stream LAMEDUCK_<q>, subject lameduck.<q>.jobs, durable consumer
// <q>-worker, and keys <q>.<runner id> of the epochs bucket.
func demoStream(q string) string   { return "LAMEDUCK_" + q }
func demoSubject(q string) string  { return "lameduck." + q + ".jobs" }
func demoConsumer(q string) string { return q + "-worker" }

// embeddedStart bounds how long the embedded server may take to accept
// connections.
const embeddedStart = 10 * time.Second

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
				"; use another --name, start the embedded server on a fresh --store DIR, or delete that stream"
		}
		return nil, nil, nil, fmt.Errorf("JetStream stream %s at %s: %w (%s)", demoStream(q), url, err, hint)
	}
	return nc, js, st, nil
}

// demoJobID names a job by its body's id, as enqueue gives it.
func demoJobID(msg jetstream.Msg) string {
	var b demoJob
	_ = json.Unmarshal(msg.Data(), &b)
	return b.ID
}

// demoConsumerFor returns the queue's durable consumer. It creates it with
// --ack-wait and --max-deliver when it does not exist; an existing one
// keeps its own AckWait and MaxDeliver (a real consumer's are an
// operator's choice), unless the flag was given, which sets it.
func demoConsumerFor(ctx context.Context, st jetstream.Stream, o workerOptions) (jetstream.Consumer, error) {
	cons, err := st.Consumer(ctx, demoConsumer(o.name))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return st.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       demoConsumer(o.name),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       o.ackWait,
			MaxDeliver:    o.maxDeliver,
			MaxAckPending: 1000,
		})
	}
	if err != nil {
		return nil, err
	}
	cfg := cons.CachedInfo().Config
	changed := false
	if o.ackWaitSet && cfg.AckWait != o.ackWait {
		cfg.AckWait, changed = o.ackWait, true
	}
	if o.maxDelivSet && cfg.MaxDeliver != o.maxDeliver {
		cfg.MaxDeliver, changed = o.maxDeliver, true
	}
	if !changed {
		return cons, nil
	}
	return st.UpdateConsumer(ctx, cfg)
}

// openNATS connects the demo worker to JetStream (starting the embedded
// server first when --nats is empty), ensures the stream and the consumer,
// and returns the queue: an ldnats.Source, and ldnats.Epochs or static
// epochs. The closers it registers run in reverse: the epoch key is
// retired, then the connection closed, then the embedded server stopped.
// On an error it undoes what it did.
func openNATS(ctx context.Context, o workerOptions, lc *lameduck.Lifecycle, log *slog.Logger) (q demoQueue, err error) {
	var undo undoer
	defer undo.onError(&err)
	url := o.natsURL
	if url == "" {
		ns, err := startEmbedded(o.embeddedAddr, o.store)
		if err != nil {
			return q, demoErrorf("lameduck: demo-worker: %w", err)
		}
		stop := func() { ns.Shutdown(); ns.WaitForShutdown() }
		undo = append(undo, stop)
		url = ns.ClientURL()
		log.Info("demo-worker: embedded NATS server with JetStream", "url", url, "store", o.store)
		if err := lc.AddCloser("embedded NATS server", func(context.Context) error { stop(); return nil }); err != nil {
			return q, err
		}
	}
	nc, js, st, err := connect(ctx, url, o.name)
	if err != nil {
		return q, demoErrorf("lameduck: demo-worker: %w", err)
	}
	undo = append(undo, nc.Close)
	if err := lc.AddCloser("NATS connection", func(context.Context) error { nc.Close(); return nil }); err != nil {
		return q, err
	}
	cons, err := demoConsumerFor(ctx, st, o)
	if err != nil {
		return q, demoErrorf("lameduck: demo-worker: JetStream consumer %s of stream %s at %s: %w", demoConsumer(o.name), demoStream(o.name), url, err)
	}
	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{ID: demoJobID, Logger: log})
	if err != nil {
		return q, demoErrorf("lameduck: demo-worker: %w", err)
	}
	q.epochs, err = openEpochs(lc, o, "kv", "epoch key", "", func(draining func() bool) (publishedEpochs, error) {
		return ldnats.NewEpochs(ctx, js, ldnats.EpochsConfig{Fleet: o.name, Poll: o.epochPoll, Draining: draining})
	})
	if err != nil {
		return q, err
	}
	q.src = src
	q.job = func(j worker.Job) *countedJob {
		nj := j.(*ldnats.Job)
		return &countedJob{Job: nj, body: nj.Msg().Data(), requeues: func(ctx context.Context) bool {
			return worker.HandBackCause(ctx) != nil && nj.LastDelivery()
		}}
	}
	cc := cons.CachedInfo().Config
	q.attrs = []any{"nats", url, "stream", demoStream(o.name), "consumer", demoConsumer(o.name),
		"ack_wait", cc.AckWait.String(), "in_progress_every", src.InProgressEvery().String(), "max_deliver", cc.MaxDeliver}
	return q, nil
}

// enqueueNATS publishes jobs to the stream of --name at --nats (default:
// the embedded server's address), and returns where.
func enqueueNATS(ctx context.Context, o workerOptions, jobs []demoJob) (string, error) {
	url := o.natsURL
	if url == "" {
		url = "nats://" + o.embeddedAddr
	}
	nc, js, _, err := connect(ctx, url, o.name)
	if err != nil && o.natsURL == "" && errors.Is(err, nats.ErrNoServers) {
		return "", demoErrorf("lameduck: demo-worker enqueue: no embedded NATS server answers on --embedded-addr=%s (%w): "+
			"without --nats, enqueue sends to the server inside a running demo-worker; start 'lameduck demo-worker' first, "+
			"or pass --nats URL", o.embeddedAddr, err)
	}
	if err != nil {
		return "", demoErrorf("lameduck: demo-worker enqueue: %w", err)
	}
	defer nc.Close()
	for _, j := range jobs {
		body, _ := json.Marshal(j)
		if _, err := js.Publish(ctx, demoSubject(o.name), body, jetstream.WithMsgID(j.ID)); err != nil {
			return "", demoErrorf("lameduck: demo-worker enqueue: publish %s to %s at %s: %w", j.ID, demoSubject(o.name), url, err)
		}
	}
	return url, nil
}

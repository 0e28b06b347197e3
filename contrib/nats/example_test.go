package ldnats_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A check of the bus and of JetStream, against a NATS server embedded in
// the process for the example. The bus is shared by every replica, so the
// check is not critical: a lost bus makes readiness "degraded" (still 200)
// instead of emptying the Service (docs/probes-and-shutdown.md, "When a
// check should be critical"). In a service, pass the check to
// Lifecycle.AddCheck instead of a Checker of its own:
//
//	lc.AddCheck(ldnats.CheckJetStream(health.Check{Name: "bus"}, nc))
func ExampleCheckJetStream() {
	url, stop := embeddedServer()
	defer stop()

	// nats.go reconnects by itself; the check reports RECONNECTING meanwhile.
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// A deadline of 10s rather than the default 1s: the example's server
	// shares the process, and a loaded machine can keep its JetStream
	// answer waiting past a second.
	c := health.NewChecker(health.CheckerOptions{})
	if err := c.AddCheck(ldnats.CheckJetStream(health.Check{Name: "bus", Timeout: 10 * time.Second}, nc)); err != nil {
		log.Fatal(err)
	}
	rep, err := c.Run(context.Background(), "", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Status, rep.Checks["bus"])

	nc.Close()
	rep, _ = c.Run(context.Background(), "", nil)
	fmt.Println(rep.Status, rep.Checks["bus"])
	// Output:
	// ok ok
	// degraded error: lameduck: nats: the connection is CLOSED, not CONNECTED (last server (none))
}

// A runner consuming a JetStream pull consumer, superseded by a newer
// rollout epoch through the key-value store, against a NATS server
// embedded in the process for the example. Each job is acknowledged when
// its handler returns nil and handed back (a NAK) when it returns an
// error; while it runs, the Source keeps it in progress. SIGTERM drains it.
func ExampleNewSource() {
	url, stop := embeddedServer()
	defer stop()

	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		log.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"job-1", "job-2"} {
		if _, err := js.Publish(ctx, "jobs", []byte("payload"), jetstream.WithMsgID(id)); err != nil {
			log.Fatal(err)
		}
	}

	var w *worker.Worker
	epochs, err := ldnats.NewEpochs(ctx, js, ldnats.EpochsConfig{
		Fleet:    "worker",
		Draining: func() bool { return w.Lifecycle().Events().ShutdownInitiated.Fired() }, // asked only while w runs
	})
	if err != nil {
		log.Fatal(err)
	}
	w, err = worker.New(worker.Config{
		Lifecycle: lameduck.Config{
			Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
			ProbeAddr:     "127.0.0.1:0",
			IgnoreSignals: true, // a real runner listens for SIGTERM
		},
		Epochs: epochs, // LAMEDUCK_EPOCH is this runner's
	})
	if err != nil {
		log.Fatal(err) // names the setting, its value and the fix
	}
	if err := w.Lifecycle().AddCloser("epoch key", epochs.Retire); err != nil {
		log.Fatal(err)
	}
	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{})
	if err != nil {
		log.Fatal(err)
	}
	done := 0
	err = w.AddLoop(worker.Loop{
		Name:   "jobs",
		Source: src,
		Handle: func(ctx context.Context, job worker.Job) error {
			msg := job.(*ldnats.Job).Msg()
			fmt.Println("done", job.ID(), string(msg.Data()))
			if done++; done == 2 {
				w.Lifecycle().BeginShutdown("example over") // as SIGTERM would
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped")
	// Output:
	// done job-1 payload
	// done job-2 payload
	// stopped
}

// embeddedServer starts a NATS server with JetStream in the process, on a
// free port of 127.0.0.1 and a temporary store, and returns its URL and
// what stops it and removes the store.
func embeddedServer() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "ldnats-example")
	if err != nil {
		log.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	ns.Start()
	stop = func() { ns.Shutdown(); ns.WaitForShutdown(); os.RemoveAll(dir) }
	if !ns.ReadyForConnections(10 * time.Second) {
		stop()
		log.Fatal("the embedded server did not start")
	}
	return ns.ClientURL(), stop
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// defaultEmbeddedAddr is where the embedded NATS server listens, beside (not
// on) a NATS server the machine may already run on 4222.
const defaultEmbeddedAddr = "127.0.0.1:4223"

type workerOptions struct {
	natsURL      string
	queue        string
	embeddedAddr string
	store        string
	probeAddr    string
	probeAddrSet bool
	logFormat    string
	loops        int
	ackWait      time.Duration
	ackWaitSet   bool
	maxDeliver   int
	maxDelivSet  bool
	epochSource  string
	epochPoll    time.Duration
	stallAfter   int
	livenessFlr  time.Duration
}

func newDemoWorkerCommand() *cobra.Command {
	var o workerOptions
	cmd := &cobra.Command{
		Use:   "demo-worker",
		Short: "Run a demo runner that consumes jobs from NATS JetStream and drains without losing one",
		Long: `Run a demo runner built on lameduck's worker package: it consumes jobs from a
NATS JetStream pull consumer, one at a time per loop, acknowledging each when
it is done (in-progress acks, every third of the consumer's AckWait, keep a
long job from being redelivered). --ack-wait and --max-deliver set the
consumer's AckWait and MaxDeliver when it is created, or when given; an
existing consumer otherwise keeps its own. A job handed back by the runner
(drain, interrupt, superseded) at its last delivery is re-published, so it is
never stranded by MaxDeliver; a job that fails counts against it.

Without --nats it starts an embedded NATS server with JetStream on
--embedded-addr (default 127.0.0.1:4223), storing in --store, so it runs with
no setup and its queue survives a restart. Publish jobs with
"lameduck demo-worker enqueue --n 100 --d 200ms".

Probes and /metrics on --probe-addr (default :9090): GET /healthz is 503 "stalled" when an
idle loop stops cycling; GET /readyz is 503 "starting" before the first fetch,
"superseded" when a newer LAMEDUCK_EPOCH runs, "draining" (with "busy") after
SIGTERM. On SIGTERM no new job is taken; LAMEDUCK_DRAIN_MODE=complete (the
default) finishes the job in flight, bounded by LAMEDUCK_DRAIN_TIMEOUT (8h);
LAMEDUCK_DRAIN_MODE=interrupt cancels it and NAKs it for redelivery.

Every LAMEDUCK_* variable applies (LAMEDUCK_EPOCH, LAMEDUCK_EPOCH_MISMATCH_DELAY,
LAMEDUCK_FETCH_WAIT, LAMEDUCK_TERMINATION_GRACE, ...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.probeAddrSet = cmd.Flags().Changed("probe-addr")
			o.ackWaitSet, o.maxDelivSet = cmd.Flags().Changed("ack-wait"), cmd.Flags().Changed("max-deliver")
			return runDemoWorker(cmd.Context(), o)
		},
	}
	f := cmd.PersistentFlags()
	f.StringVar(&o.natsURL, "nats", "", "NATS server URL, such as nats://127.0.0.1:4222; empty: an embedded server (enqueue: the embedded server's address)")
	f.StringVar(&o.embeddedAddr, "embedded-addr", defaultEmbeddedAddr, "listen address of the embedded NATS server")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.queue, "queue", "demo", "the queue's name: stream LAMEDUCK_<queue>, subject lameduck.<queue>.jobs, consumer <queue>-worker")
	lf := cmd.Flags()
	lf.StringVar(&o.store, "store", filepath.Join(os.TempDir(), "lameduck-demo-worker"), "JetStream store directory of the embedded server")
	lf.StringVar(&o.probeAddr, "probe-addr", worker.DefaultProbeAddr, "listen address of the probes (LAMEDUCK_PROBE_ADDR when the flag is not given)")
	lf.IntVar(&o.loops, "loops", 1, "consume loops, each running one job at a time")
	lf.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "the consumer's AckWait when this creates it (given: also set on an existing one); a job in flight sends an in-progress ack every third of the consumer's AckWait")
	lf.IntVar(&o.maxDeliver, "max-deliver", -1, "the consumer's MaxDeliver when this creates it (given: also set on an existing one); -1: unlimited. A job's failures count against it; the runner's own hand-backs never strand a job (docs/runners.md)")
	lf.StringVar(&o.epochSource, "epoch-source", "kv", `where the fleet's newest LAMEDUCK_EPOCH is read: "kv" (JetStream key-value, each runner publishes its own) or "static" (never superseded)`)
	lf.DurationVar(&o.epochPoll, "epoch-poll", worker.DefaultEpochPoll, "how often the epoch source is asked")
	lf.IntVar(&o.stallAfter, "simulate-stall-after", 0, "stop fetching after this many fetches, as a wedged consumer would (0: never)")
	lf.DurationVar(&o.livenessFlr, "liveness-floor", worker.DefaultLivenessFloor, "the least an idle loop may go without cycling before liveness says stalled (lower it only to try a stall quickly)")
	_ = lf.MarkHidden("simulate-stall-after")
	_ = lf.MarkHidden("liveness-floor")
	cmd.AddCommand(newEnqueueCommand(&o))
	return cmd
}

func newEnqueueCommand(o *workerOptions) *cobra.Command {
	var n int
	var d time.Duration
	cmd := &cobra.Command{
		Use:   "enqueue",
		Short: "Publish demo jobs for demo-worker",
		Long: `Publish --n jobs that each run for --d to the demo worker's JetStream stream,
at --nats (default: the embedded server of a demo-worker started without
--nats, nats://` + defaultEmbeddedAddr + `).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n <= 0 {
				return usagef("--n=%d: must be positive", n)
			}
			if d < 0 {
				return usagef("--d=%s: must not be negative", d)
			}
			if err := checkQueue(o.queue); err != nil {
				return usageError{err}
			}
			url := o.natsURL
			if url == "" {
				url = "nats://" + o.embeddedAddr
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			nc, js, _, err := connect(ctx, url, o.queue)
			if err != nil {
				return err
			}
			defer nc.Close()
			batch := time.Now().UTC().Format("150405.000")
			for i := 1; i <= n; i++ {
				id := fmt.Sprintf("job-%s-%04d", batch, i)
				body, _ := json.Marshal(demoJob{ID: id, D: d.String()})
				if _, err := js.Publish(ctx, demoSubject(o.queue), body, jetstream.WithMsgID(id)); err != nil {
					return fmt.Errorf("publish %s: %w", id, err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enqueued %d job(s) of %s on %s (ids job-%s-0001 to job-%s-%04d)\n", n, d, url, batch, batch, n)
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "n", 10, "how many jobs")
	cmd.Flags().DurationVar(&d, "d", 200*time.Millisecond, "how long each job runs")
	return cmd
}

func runDemoWorker(ctx context.Context, o workerOptions) error {
	log, err := newLogger(o.logFormat)
	if err != nil {
		return usageError{err}
	}
	switch {
	case o.loops < 1:
		return usagef("--loops=%d: must be at least 1", o.loops)
	case o.ackWait <= 0:
		return usagef("--ack-wait=%s: must be positive", o.ackWait)
	case o.maxDeliver == 0 || o.maxDeliver < -1:
		return usagef("--max-deliver=%d: must be positive, or -1 for unlimited", o.maxDeliver)
	case o.epochSource != "kv" && o.epochSource != "static":
		return usagef(`--epoch-source=%q: use "kv" or "static"`, o.epochSource)
	}
	if err := checkQueue(o.queue); err != nil {
		return usageError{err}
	}
	metrics := newWorkerMetrics()
	cfg := lameduck.Config{Logger: log, ProbeListenerHandler: metrics.handler()}
	if o.probeAddrSet { // otherwise LAMEDUCK_PROBE_ADDR, then the runner default
		cfg.ProbeAddr = o.probeAddr
	}
	// Settings first, so a bad LAMEDUCK_* variable stops the process before
	// it starts a server or connects anywhere.
	var epochs worker.EpochSource
	wk, err := worker.New(worker.Config{Lifecycle: cfg, EpochPoll: o.epochPoll, LivenessFloor: o.livenessFlr,
		Epochs: epochSourceFunc(func(ctx context.Context, mine uint64) (uint64, error) { return epochs.Newest(ctx, mine) })})
	if err != nil {
		logErrors(log, o.logFormat, "lameduck: invalid configuration; nothing was started", err)
		return exitError{err}
	}
	lc := wk.Lifecycle()

	url := o.natsURL
	var ns *server.Server
	if url == "" {
		ns, err = startEmbedded(o.embeddedAddr, o.store)
		if err != nil {
			log.Error("demo-worker: " + err.Error())
			return exitError{err}
		}
		url = ns.ClientURL()
		log.Info("demo-worker: embedded NATS server with JetStream", "url", url, "store", o.store)
		if err := lc.AddCloser("embedded NATS server", func(context.Context) error {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil
		}); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nc, js, st, err := connect(cctx, url, o.queue)
	if err == nil {
		err = lc.AddCloser("NATS connection", func(context.Context) error { nc.Close(); return nil })
	}
	if err != nil {
		log.Error("demo-worker: " + err.Error())
		if ns != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
		return exitError{err}
	}
	cons, err := demoConsumerFor(cctx, st, o)
	var src *ldnats.Source
	if err == nil {
		src, err = ldnats.NewSource(js, cons, ldnats.SourceConfig{ID: demoJobID, Logger: log})
	}
	if err == nil {
		if o.epochSource == "kv" {
			var kve *ldnats.Epochs
			kve, err = ldnats.NewEpochs(cctx, js, ldnats.EpochsConfig{Fleet: o.queue, Poll: o.epochPoll, Draining: lc.Events().ShutdownInitiated.Fired})
			if err == nil { // runs before the connection's closer: closers run in reverse
				epochs = kve
				err = lc.AddCloser("epoch key", kve.Retire)
			}
		} else {
			epochs = worker.StaticEpochs(0)
		}
	}
	if err != nil {
		err = fmt.Errorf("demo-worker: %w", err)
		log.Error(err.Error())
		nc.Close()
		if ns != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
		return exitError{err}
	}
	cc := cons.CachedInfo().Config
	log.Info("demo-worker: consuming", "nats", url, "stream", demoStream(o.queue), "consumer", demoConsumer(o.queue), "loops", o.loops,
		"ack_wait", cc.AckWait.String(), "in_progress_every", src.InProgressEvery().String(), "max_deliver", cc.MaxDeliver,
		"epoch", wk.Epoch(), "epoch_source", o.epochSource, "drain_mode", lc.Config().DrainMode)

	loopSrc := &demoSource{src: src, stallAfter: o.stallAfter, metrics: metrics}
	for i := 1; i <= o.loops; i++ {
		name := "jobs"
		if o.loops > 1 {
			name = fmt.Sprintf("jobs-%d", i)
		}
		if err := wk.AddLoop(worker.Loop{Name: name, Source: loopSrc, Handle: demoHandler(log, metrics)}); err != nil {
			return err
		}
	}
	if err := wk.Run(ctx); err != nil {
		return exitError{err}
	}
	return nil
}

// demoConsumerFor returns the queue's durable consumer. It creates it with
// --ack-wait and --max-deliver when it does not exist; an existing one
// keeps its own AckWait and MaxDeliver (a real consumer's are an
// operator's choice), unless the flag was given, which sets it.
func demoConsumerFor(ctx context.Context, st jetstream.Stream, o workerOptions) (jetstream.Consumer, error) {
	cons, err := st.Consumer(ctx, demoConsumer(o.queue))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return st.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       demoConsumer(o.queue),
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

// demoHandler runs a demo job: it sleeps the job's duration (the Source
// keeps it in progress meanwhile), and stops when ctx ends.
func demoHandler(log interface {
	Info(string, ...any)
	Warn(string, ...any)
}, m *workerMetrics) func(context.Context, worker.Job) error {
	return func(ctx context.Context, j worker.Job) error {
		job := j.(*countedJob)
		var body demoJob
		if err := json.Unmarshal(job.Msg().Data(), &body); err != nil || body.ID == "" {
			log.Warn("demo-worker: dropping a malformed job", "job", job.ID(), "error", fmt.Sprintf("not a demo job: %q", job.Msg().Data()))
			return nil
		}
		d, err := time.ParseDuration(body.D)
		if err != nil {
			log.Warn("demo-worker: dropping a job with a bad duration", "job", job.ID(), "d", body.D)
			return nil
		}
		began := time.Now()
		log.Info("demo-worker: job started", "job", job.ID(), "d", d.String())
		m.started.Inc()
		m.inFlight.Inc()
		defer m.inFlight.Dec()
		done := time.NewTimer(d)
		defer done.Stop()
		select {
		case <-done.C:
			log.Info("demo-worker: job done", "job", job.ID(), "took", time.Since(began).Round(time.Millisecond).String())
			return nil
		case <-ctx.Done():
			log.Info("demo-worker: job stopped; checkpointing", "job", job.ID(), "ran", time.Since(began).Round(time.Millisecond).String(),
				"cause", strings.TrimPrefix(context.Cause(ctx).Error(), "worker: "))
			return context.Cause(ctx)
		}
	}
}

// epochSourceFunc adapts a function to worker.EpochSource.
type epochSourceFunc func(ctx context.Context, mine uint64) (uint64, error)

func (f epochSourceFunc) Newest(ctx context.Context, mine uint64) (uint64, error) {
	return f(ctx, mine)
}

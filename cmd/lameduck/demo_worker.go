package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	ldkube "github.com/lameduck/lameduck/contrib/kube"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/worker"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"
)

// defaultEmbeddedAddr is where the embedded NATS server listens, beside (not
// on) a NATS server the machine may already run on 4222.
const defaultEmbeddedAddr = "127.0.0.1:4223"

// The default addresses of --amqp and --postgres: the RabbitMQ and the
// PostgreSQL a developer runs on their machine with their stock settings.
const (
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test"
)

// demoQueues are the job sources --queue selects, and each one's own
// flags, which the others refuse.
var demoQueues = []demoQueueKind{
	{"nats", []string{"nats", "embedded-addr", "store"}},
	{"amqp", []string{"amqp"}},
	{"postgres", []string{"postgres"}},
}

// demoQueueKind is one value of --queue and the flags that only it takes.
type demoQueueKind struct {
	kind  string
	flags []string
}

// knownQueue reports whether kind is a value of --queue.
func knownQueue(kind string) bool {
	return slices.ContainsFunc(demoQueues, func(q demoQueueKind) bool { return q.kind == kind })
}

// maxName bounds --name: the longest that fits every queue's names, the
// PostgreSQL table lameduck_<name>_jobs with its index (54 bytes before
// "_next_idx") the tightest.
const maxName = 40

type workerOptions struct {
	queue        string // nats, amqp or postgres
	name         string
	natsURL      string
	amqpURL      string
	postgresURL  string
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
	deletionCost bool // set the pod's deletion cost while a job runs (contrib/kube)
}

func newDemoWorkerCommand() *cobra.Command {
	var o workerOptions
	cmd := &cobra.Command{
		Use:   "demo-worker",
		Short: "Run a demo runner that consumes jobs from NATS JetStream, RabbitMQ or PostgreSQL and drains without losing one",
		Long: `Run a demo runner built on lameduck's worker package: it consumes jobs, one at
a time per loop, from the queue --queue selects, and acknowledges each when it
is done; the queue's claim on a job is kept alive while it runs, however long.

--queue nats (the default): a JetStream pull consumer (contrib/nats). Without
--nats it starts an embedded NATS server with JetStream on --embedded-addr
(default 127.0.0.1:4223), storing in --store, so it runs with no setup and its
queue survives a restart. --ack-wait and --max-deliver set the consumer's
AckWait (in-progress acks every third of it keep a long job) and MaxDeliver
when it is created, or when given; an existing consumer otherwise keeps its
own. A job the runner hands back at its last delivery is re-published, so it
is never stranded by MaxDeliver; a job that fails counts against it.

--queue amqp: a RabbitMQ quorum queue at --amqp (contrib/amqp), declared at
start with a delivery limit of --max-deliver (-1: 20) and a dead-letter queue.

--queue postgres: a jobs table at --postgres (contrib/pgx), created at start,
claimed with SELECT ... FOR UPDATE SKIP LOCKED under a lease of --ack-wait,
renewed every third of it.

--name (default "demo") names the queue: stream LAMEDUCK_<name>, queue
lameduck.<name>.jobs, table lameduck_<name>_jobs. Publish jobs with
"lameduck demo-worker enqueue --n 100 --d 200ms" (the same --queue, --name
and address).

Probes and /metrics on --probe-addr (default :9090): GET /healthz is 503 "stalled" when an
idle loop stops cycling; GET /readyz is 503 "starting" before the first fetch,
"superseded" when a newer LAMEDUCK_EPOCH runs, "draining" (with "busy") after
SIGTERM. On SIGTERM no new job is taken; LAMEDUCK_DRAIN_MODE=complete (the
default) finishes the job in flight, bounded by LAMEDUCK_DRAIN_TIMEOUT (8h);
LAMEDUCK_DRAIN_MODE=interrupt cancels it and hands it back for redelivery.

Every LAMEDUCK_* variable applies (LAMEDUCK_EPOCH, LAMEDUCK_EPOCH_MISMATCH_DELAY,
LAMEDUCK_FETCH_WAIT, LAMEDUCK_TERMINATION_GRACE, ...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.probeAddrSet = cmd.Flags().Changed("probe-addr")
			o.ackWaitSet, o.maxDelivSet = cmd.Flags().Changed("ack-wait"), cmd.Flags().Changed("max-deliver")
			if err := o.validate(cmd.Flags().Changed); err != nil {
				return err
			}
			return runDemoWorker(cmd.Context(), o)
		},
	}
	f := cmd.PersistentFlags()
	f.StringVar(&o.queue, "queue", "nats", "the job source: nats (JetStream), amqp (a RabbitMQ quorum queue) or postgres (a jobs table)")
	f.StringVar(&o.name, "name", "demo", "the queue's name: stream LAMEDUCK_<name> (subject lameduck.<name>.jobs, consumer <name>-worker), RabbitMQ queue lameduck.<name>.jobs, table lameduck_<name>_jobs")
	f.StringVar(&o.natsURL, "nats", "", "--queue nats: the NATS server's URL, such as nats://127.0.0.1:4222; empty: an embedded server (enqueue: the embedded server's address)")
	f.StringVar(&o.embeddedAddr, "embedded-addr", defaultEmbeddedAddr, "--queue nats: listen address of the embedded NATS server")
	f.StringVar(&o.amqpURL, "amqp", defaultAMQPURL, "--queue amqp: the RabbitMQ server's URL")
	f.StringVar(&o.postgresURL, "postgres", defaultPostgresURL, "--queue postgres: the PostgreSQL database's URL or DSN (pool_max_conns defaults to --loops + 2)")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	lf := cmd.Flags()
	lf.StringVar(&o.store, "store", filepath.Join(os.TempDir(), "lameduck-demo-worker"), "--queue nats: JetStream store directory of the embedded server")
	lf.StringVar(&o.probeAddr, "probe-addr", worker.DefaultProbeAddr, "listen address of the probes (LAMEDUCK_PROBE_ADDR when the flag is not given)")
	lf.IntVar(&o.loops, "loops", 1, "consume loops, each running one job at a time")
	lf.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "--queue nats: the consumer's AckWait when this creates it (given: also set on an existing one), an in-progress ack sent every third of it; --queue postgres: a claim's lease, renewed every third of it (at least 1s)")
	lf.IntVar(&o.maxDeliver, "max-deliver", -1, "--queue nats: the consumer's MaxDeliver when this creates it (given: also set on an existing one), -1 unlimited; --queue amqp: the queue's delivery limit, -1 for 20. A job's failures count against it; the runner's own hand-backs never strand a job (docs/runners.md)")
	lf.StringVar(&o.epochSource, "epoch-source", "", `where the fleet's newest LAMEDUCK_EPOCH is read: "kv" (--queue nats: a JetStream key-value bucket), "table" (--queue postgres: a table), each runner publishing its own, or "static" (never superseded); empty: kv, table, or static for amqp`)
	lf.DurationVar(&o.epochPoll, "epoch-poll", worker.DefaultEpochPoll, "how often the epoch source is asked")
	lf.IntVar(&o.stallAfter, "simulate-stall-after", 0, "stop fetching after this many fetches, as a wedged consumer would (0: never)")
	lf.BoolVar(&o.deletionCost, "deletion-cost", false, "in a pod: set its controller.kubernetes.io/pod-deletion-cost while a job runs, so a scale-in deletes idle runners first (needs POD_NAME and POD_NAMESPACE from the downward API, and get and patch on pods; docs/runners.md)")
	lf.DurationVar(&o.livenessFlr, "liveness-floor", worker.DefaultLivenessFloor, "the least an idle loop may go without cycling before liveness says stalled (lower it only to try a stall quickly)")
	_ = lf.MarkHidden("simulate-stall-after")
	_ = lf.MarkHidden("liveness-floor")
	cmd.AddCommand(newEnqueueCommand(&o))
	return cmd
}

// validate checks the flags of demo-worker (and, through checkQueue, of
// enqueue) and returns every problem at once as a usageError, each naming
// the flag, its value and the fix. It resolves an empty --epoch-source.
// changed reports whether a flag was given.
func (o *workerOptions) validate(changed func(string) bool) error {
	errs := []error{o.checkQueue(changed)}
	switch {
	case o.loops < 1:
		errs = append(errs, fmt.Errorf("--loops=%d: must be at least 1", o.loops))
	}
	switch {
	case o.queue == "amqp" && o.ackWaitSet:
		errs = append(errs, fmt.Errorf("--ack-wait=%s: --queue amqp has no ack wait (RabbitMQ holds a delivery unacknowledged for as long as its job runs); leave it out", o.ackWait))
	case o.queue == "postgres" && o.ackWait < ldpgx.MinLease:
		errs = append(errs, fmt.Errorf("--ack-wait=%s: with --queue postgres it is a claim's lease, renewed every third of it; use at least %s", o.ackWait, ldpgx.MinLease))
	case o.ackWait <= 0:
		errs = append(errs, fmt.Errorf("--ack-wait=%s: must be positive, such as 30s", o.ackWait))
	}
	switch {
	case o.queue == "postgres" && o.maxDelivSet:
		errs = append(errs, fmt.Errorf("--max-deliver=%d: --queue postgres takes a job's limit from its row's max_attempts, set when it is enqueued (%d by default); leave it out", o.maxDeliver, ldpgx.DefaultMaxAttempts))
	case o.maxDeliver == 0 || o.maxDeliver < -1:
		errs = append(errs, fmt.Errorf("--max-deliver=%d: must be positive, or -1 for unlimited (nats) or 20 (amqp)", o.maxDeliver))
	}
	// The epoch store of the queue's own server, if it has one.
	own := map[string]string{"nats": "kv", "postgres": "table"}[o.queue]
	choices := `"static"`
	if own != "" {
		choices = fmt.Sprintf(`%q or "static"`, own)
	}
	switch {
	case !knownQueue(o.queue): // checkQueue said so
	case o.epochSource == "" && own != "":
		o.epochSource = own
	case o.epochSource == "":
		o.epochSource = "static"
	case o.epochSource == "static" || o.epochSource == own:
	case o.epochSource == "kv" || o.epochSource == "table":
		errs = append(errs, fmt.Errorf("--epoch-source=%q: --queue %s has none; use %s", o.epochSource, o.queue, choices))
	default:
		errs = append(errs, fmt.Errorf("--epoch-source=%q: unknown; use %s", o.epochSource, choices))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// checkQueue checks --queue, --name and the flags of the queues not
// selected, which would do nothing: each problem names the flag, its value
// and the fix.
func (o *workerOptions) checkQueue(changed func(string) bool) error {
	var errs []error
	own := slices.IndexFunc(demoQueues, func(q demoQueueKind) bool { return q.kind == o.queue })
	if own < 0 {
		hint := ""
		if checkName(o.queue) == nil {
			hint = fmt.Sprintf(" (--queue picks the source; the queue's name is --name, such as --name %s)", o.queue)
		}
		return fmt.Errorf("--queue=%q: use nats, amqp or postgres%s", o.queue, hint)
	}
	if err := checkName(o.name); err != nil {
		errs = append(errs, err)
	}
	switch o.queue {
	case "amqp":
		if _, err := amqp.ParseURI(o.amqpURL); err != nil {
			errs = append(errs, fmt.Errorf("--amqp=%q: %v; use a URL such as %s", health.Redact(o.amqpURL), err, defaultAMQPURL))
		}
	case "postgres":
		if _, err := pgxpool.ParseConfig(o.postgresURL); err != nil {
			errs = append(errs, fmt.Errorf("--postgres=%q: not a PostgreSQL URL or DSN (%s); use one such as %s",
				health.Redact(o.postgresURL), health.Redact(err.Error()), defaultPostgresURL))
		}
	}
	for i, q := range demoQueues {
		if i == own {
			continue
		}
		for _, f := range q.flags {
			if changed(f) {
				errs = append(errs, fmt.Errorf("--%s is for --queue %s, and does nothing with --queue %s; leave it out, or use --%s",
					f, q.kind, o.queue, strings.Join(demoQueues[own].flags, ", --")))
			}
		}
	}
	return errors.Join(errs...)
}

// checkName refuses a queue name that one of the queues could not use in
// its names.
func checkName(q string) error {
	if q == "" || strings.Trim(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return fmt.Errorf("--name=%q: use letters, digits, '_' and '-' only, such as \"demo\"", q)
	}
	if len(q) > maxName {
		return fmt.Errorf("--name=%q: %d bytes; use at most %d (the PostgreSQL table lameduck_<name>_jobs must fit its index's name)", q, len(q), maxName)
	}
	return nil
}

func newEnqueueCommand(o *workerOptions) *cobra.Command {
	var n int
	var d time.Duration
	cmd := &cobra.Command{
		Use:   "enqueue",
		Short: "Publish demo jobs for demo-worker",
		Long: `Publish --n jobs that each run for --d to the demo worker's queue: --queue nats
(the default) publishes to its JetStream stream at --nats (default: the
embedded server of a demo-worker started without --nats,
nats://` + defaultEmbeddedAddr + `), --queue amqp to its RabbitMQ queue at
--amqp (declared if it does not exist yet), --queue postgres inserts into its
table at --postgres (created if need be), in one transaction. Each job's id,
job-<hhmmss.mmm>-<n>, is its message id or its row's key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs []error
			if n <= 0 {
				errs = append(errs, fmt.Errorf("--n=%d: must be positive", n))
			}
			if d < 0 {
				errs = append(errs, fmt.Errorf("--d=%s: must not be negative", d))
			}
			errs = append(errs, o.checkQueue(cmd.Flags().Changed))
			if err := errors.Join(errs...); err != nil {
				return usageError{err}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			batch := time.Now().UTC().Format("150405.000")
			jobs := make([]demoJob, n)
			for i := range jobs {
				jobs[i] = demoJob{ID: fmt.Sprintf("job-%s-%04d", batch, i+1), D: d.String()}
			}
			var where string
			var err error
			switch o.queue {
			case "nats":
				where, err = enqueueNATS(ctx, *o, jobs)
			case "amqp":
				where, err = enqueueAMQP(ctx, *o, jobs)
			case "postgres":
				where, err = enqueuePostgres(ctx, *o, jobs)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enqueued %d job(s) of %s on %s (ids job-%s-0001 to job-%s-%04d)\n", n, d, where, batch, batch, n)
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
	var dc *ldkube.DeletionCost // before the queue: a runner that cannot mark itself busy says so at once
	if o.deletionCost {
		if dc, err = podDeletionCost(log); err != nil {
			log.Error(err.Error())
			return exitError{err}
		}
	}

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var q demoQueue
	switch o.queue {
	case "nats":
		q, err = openNATS(cctx, o, lc, log)
	case "amqp":
		q, err = openAMQP(cctx, o, lc, log)
	case "postgres":
		q, err = openPostgres(cctx, o, lc, log)
	}
	if err != nil {
		log.Error(err.Error())
		return exitError{err}
	}
	epochs = q.epochs
	attrs := append([]any{"queue", o.queue}, q.attrs...)
	log.Info("demo-worker: consuming", append(attrs, "loops", o.loops,
		"epoch", wk.Epoch(), "epoch_source", o.epochSource, "drain_mode", lc.Config().DrainMode)...)

	loopSrc := &demoSource{q: q, stallAfter: o.stallAfter, metrics: metrics}
	handle := demoHandler(log, metrics)
	if dc != nil {
		handle = dc.Handle(handle)
	}
	for i := 1; i <= o.loops; i++ {
		name := "jobs"
		if o.loops > 1 {
			name = fmt.Sprintf("jobs-%d", i)
		}
		if err := wk.AddLoop(worker.Loop{Name: name, Source: loopSrc, Handle: handle}); err != nil {
			return err
		}
	}
	if err := wk.Run(ctx); err != nil {
		return exitError{err}
	}
	return nil
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
		if err := json.Unmarshal(job.body, &body); err != nil || body.ID == "" {
			log.Warn("demo-worker: dropping a malformed job", "job", job.ID(), "error", fmt.Sprintf("not a demo job: %q", job.body))
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

package main

import (
	"context"
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
// key <q> of the epochs bucket.
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
		return nil, nil, nil, fmt.Errorf("JetStream stream %s at %s: %w (is JetStream enabled?)", demoStream(q), url, err)
	}
	return nc, js, st, nil
}

// natsSource is a worker.Source on a JetStream pull consumer.
type natsSource struct {
	nc         *nats.Conn
	cons       jetstream.Consumer
	stallAfter int // when > 0: the consumer stops fetching after this many fetches (a wedged consumer, for tests)
	metrics    *workerMetrics

	mu      sync.Mutex
	fetches int // guarded by mu
}

// Fetch asks for one message, waiting up to wait.
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
	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	batch, err := s.cons.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			return nil, nil
		}
		return nil, err
	}
	for msg := range batch.Messages() {
		j := newNatsJob(s.nc, msg)
		j.metrics = s.metrics
		return j, nil
	}
	if err := batch.Error(); err != nil && ctx.Err() == nil &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		return nil, err
	}
	return nil, nil
}

// natsJob is one delivered message.
type natsJob struct {
	metrics *workerMetrics
	nc      *nats.Conn
	msg     jetstream.Msg
	job     demoJob
	bad     error // the body could not be read
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

// HandBack NAKs the message, with a delay when one is asked for, and waits
// for the server to have read it (a NAK has no reply; a flush's round trip
// comes after it), so a process that exits next cannot lose it: the job
// would come back only when its ack wait expires.
func (j *natsJob) HandBack(ctx context.Context, delay time.Duration) error {
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

// kvEpochs is a worker.EpochSource on a JetStream key-value bucket: each
// runner publishes its epoch into one key with compare-and-set, so the key
// holds the newest epoch any runner has published.
type kvEpochs struct {
	kv  jetstream.KeyValue
	key string
}

func newKVEpochs(ctx context.Context, js jetstream.JetStream, key string) (*kvEpochs, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: epochBucket, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("JetStream key-value bucket %s: %w", epochBucket, err)
	}
	return &kvEpochs{kv: kv, key: key}, nil
}

// Newest publishes mine when it is newer than the stored epoch and returns
// the newest.
func (k *kvEpochs) Newest(ctx context.Context, mine uint64) (uint64, error) {
	val := []byte(strconv.FormatUint(mine, 10))
	for range 5 { // compare-and-set races with other runners
		e, err := k.kv.Get(ctx, k.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err := k.kv.Create(ctx, k.key, val); err == nil {
				return mine, nil
			} else if !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, err
		}
		cur, err := strconv.ParseUint(string(e.Value()), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("key %s/%s holds %q, not an epoch", epochBucket, k.key, e.Value())
		}
		if cur >= mine {
			return cur, nil
		}
		if _, err := k.kv.Update(ctx, k.key, val, e.Revision()); err == nil {
			return mine, nil
		}
	}
	return 0, errors.New("the newest epoch kept changing under five compare-and-set tries")
}

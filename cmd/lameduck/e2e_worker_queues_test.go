package main

// The demo worker's queues as the end-to-end tests see them: NATS
// JetStream (a private server, or the machine's), and the machine's
// RabbitMQ and PostgreSQL (LDTEST_AMQP_URL, LDTEST_POSTGRES_DSN; a test
// fails, not skips, when CI is set and the server is missing). Each test
// gets a queue of its own name, removed when it ends, and counts what is
// left in it from the server's side.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

// testQueue is one demo-worker queue on one server, named for one test.
type testQueue struct {
	kind  string   // --queue
	name  string   // --name: unique to the test
	where []string // --queue and the server's address: the worker's and enqueue's
	// short are the worker's flags for a short claim on a job, so a job
	// lost to a crash would come back within the test: --ack-wait 2s on
	// NATS. PostgreSQL keeps its 30s lease (a 2s one leaves its claims
	// 1s on a loaded machine), RabbitMQ has none.
	short []string
	// left counts, from the server, the jobs still in the queue (ready,
	// delayed or held) and those dead-lettered.
	left func(t *testing.T) (jobs, dead int)
}

// testQueueName is a --name no other run uses.
func testQueueName() string { return fmt.Sprintf("e2e_%d_%d", os.Getpid(), time.Now().UnixNano()) }

// jetStreamQueue is a queue on the NATS server at url.
func jetStreamQueue(t *testing.T, url string) testQueue {
	t.Helper()
	q := uniqueQueue(t, url)
	return testQueue{kind: "nats", name: q, where: []string{"--queue", "nats", "--nats", url}, short: []string{"--ack-wait", "2s"},
		left: func(t *testing.T) (int, int) {
			t.Helper()
			nc, err := nats.Connect(url, nats.Timeout(5*time.Second), nats.NoReconnect())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := js.Stream(ctx, demoStream(q))
			if err != nil {
				t.Fatalf("stream %s: %v", demoStream(q), err)
			}
			// A work-queue stream deletes a message once it is acknowledged.
			return int(st.CachedInfo().State.Msgs), 0
		}}
}

// privateJetStreamQueue and machineJetStreamQueue are jetStreamQueue on a
// server of the test's own, and on the machine's.
func privateJetStreamQueue(t *testing.T) testQueue { return jetStreamQueue(t, privateJetStream(t)) }
func machineJetStreamQueue(t *testing.T) testQueue { return jetStreamQueue(t, machineJetStream(t)) }

// rabbitQueue is a queue on the machine's RabbitMQ; its work queue and
// dead-letter queue are deleted when the test ends.
func rabbitQueue(t *testing.T) testQueue {
	t.Helper()
	url := testsupport.RabbitMQ.Addr()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		testsupport.RabbitMQ.Missing(t, err)
	}
	conn.Close()
	q := testQueueName()
	withChannel := func(t *testing.T, f func(ch *amqp.Channel)) {
		t.Helper()
		conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		f(ch)
	}
	t.Cleanup(func() {
		withChannel(t, func(ch *amqp.Channel) {
			_, _ = ch.QueueDelete(demoAMQPQueue(q), false, false, false)
			_, _ = ch.QueueDelete(demoAMQPDead(q), false, false, false)
		})
	})
	return testQueue{kind: "amqp", name: q, where: []string{"--queue", "amqp", "--amqp", url},
		left: func(t *testing.T) (jobs, dead int) {
			t.Helper()
			withChannel(t, func(ch *amqp.Channel) {
				// After the runners have exited nothing is held unacknowledged:
				// a passive declare counts every job left.
				for _, c := range []struct {
					name string
					n    *int
				}{{demoAMQPQueue(q), &jobs}, {demoAMQPDead(q), &dead}} {
					info, err := ch.QueueDeclarePassive(c.name, true, false, false, false, nil)
					if err != nil {
						t.Fatalf("queue %s: %v", c.name, err)
					}
					*c.n = info.Messages
				}
			})
			return jobs, dead
		}}
}

// postgresQueue is a queue on the machine's PostgreSQL; its table, and
// its fleet's rows of the epoch table, are dropped when the test ends.
func postgresQueue(t *testing.T) testQueue {
	t.Helper()
	dsn := testsupport.Postgres.Addr()
	pool := testPool(t, dsn)
	q := testQueueName()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{demoTable(q)}.Sanitize())
		_, _ = pool.Exec(ctx, "DELETE FROM "+demoEpochTable+" WHERE fleet = $1", q)
	})
	return testQueue{kind: "postgres", name: q, where: []string{"--queue", "postgres", "--postgres", dsn},
		left: func(t *testing.T) (jobs, dead int) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// An acknowledged job's row is deleted; a ready, delayed or
			// running one stays, and a dead one stays dead.
			err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state <> 'dead'), count(*) FILTER (WHERE state = 'dead') FROM "+
				pgx.Identifier{demoTable(q)}.Sanitize()).Scan(&jobs, &dead)
			if err != nil {
				t.Fatalf("table %s: %v", demoTable(q), err)
			}
			return jobs, dead
		}}
}

// testPool is a pool on the machine's PostgreSQL at dsn, closed when the
// test ends; it fails (CI) or skips the test when PostgreSQL does not
// answer.
func testPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("%s=%q: %v", testsupport.Postgres.EnvVar, dsn, err)
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	cfg.MaxConns = 2
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		testsupport.Postgres.Missing(t, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// start starts `lameduck demo-worker` on the queue with its probes on a
// free loopback port and a 200ms epoch poll, and waits until /readyz
// answers 200.
func (tq testQueue) start(t *testing.T, env map[string]string, args ...string) *proc {
	t.Helper()
	argv := append([]string{"demo-worker", "--log-format", "json", "--name", tq.name, "--probe-addr", "127.0.0.1:0",
		"--epoch-poll", "200ms"}, tq.where...)
	argv = append(append(argv, tq.short...), args...)
	p := startCmd(t, workerEnv(env), argv...)
	p.listening()
	p.waitServing(startTimeout)
	return p
}

// enqueue runs `lameduck demo-worker enqueue` on the queue and returns the
// job ids.
func (tq testQueue) enqueue(t *testing.T, n int, d time.Duration) []string {
	t.Helper()
	return enqueue(t, tq.name, n, d, tq.where...)
}

// wantEmpty fails the test unless the queue holds no job and dead-lettered
// none: every job was done and acknowledged, as the server counts.
func (tq testQueue) wantEmpty(t *testing.T) {
	t.Helper()
	if jobs, dead := tq.left(t); jobs != 0 || dead != 0 {
		t.Fatalf("the %s queue still holds %d job(s) and dead-lettered %d; want none: every job done and acknowledged", tq.kind, jobs, dead)
	}
}

// wantDoneMetric waits until p's /metrics counts as done every job its log
// says it did (the count follows the log line once the ack is confirmed).
func wantDoneMetric(t *testing.T, p *proc) {
	t.Helper()
	done := len(p.logMatches(func(l logLine) bool { return l.msg() == "demo-worker: job done" }))
	want := fmt.Sprintf("lameduck_demo_jobs_done_total %d\n", done)
	for deadline := time.Now().Add(startTimeout); ; time.Sleep(20 * time.Millisecond) {
		m := p.get("/metrics")
		if m.code == 200 && strings.Contains(m.raw, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics = %d, want %q:\n%s", m.code, want, m.raw)
		}
	}
}

// Each mistake on the command line exits 2 before anything is started,
// naming the flag, its value and the fix.
func TestE2EWorkerFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue", "sqs"}, `lameduck: --queue="sqs": use nats, amqp or postgres`},
		{[]string{"enqueue", "--queue", "kafka"}, `lameduck: --queue="kafka": use nats, amqp or postgres`},
		{[]string{"--queue", "amqp", "--nats", "nats://127.0.0.1:4222"}, "lameduck: --nats is for --queue nats, and does nothing with --queue amqp; leave it out, or use --amqp"},
		{[]string{"enqueue", "--queue", "nats", "--postgres", "postgres://x@127.0.0.1/x"}, "lameduck: --postgres is for --queue postgres, and does nothing with --queue nats; leave it out, or use --nats, --embedded-addr, --store"},
		{[]string{"--queue", "postgres", "--store", "/tmp/x"}, "lameduck: --store is for --queue nats"},
		{[]string{"--queue", "postgres", "--epoch-source", "kv"}, `lameduck: --epoch-source="kv": --queue postgres has none; use "table" or "static"`},
		{[]string{"--queue", "amqp", "--epoch-source", "table"}, `lameduck: --epoch-source="table": --queue amqp has none; use "static"`},
		{[]string{"--epoch-source", "etcd"}, `lameduck: --epoch-source="etcd": unknown; use "kv" or "static"`},
		{[]string{"--queue", "postgres", "--max-deliver", "3"}, "lameduck: --max-deliver=3: --queue postgres takes a job's limit from its row's max_attempts"},
		{[]string{"--queue", "amqp", "--ack-wait", "5s"}, "lameduck: --ack-wait=5s: --queue amqp has no ack wait"},
		{[]string{"--queue", "postgres", "--ack-wait", "500ms"}, "lameduck: --ack-wait=500ms: with --queue postgres it is a claim's lease, renewed every third of it; use at least 1s"},
		{[]string{"--name", "a.b"}, `lameduck: --name="a.b": use letters, digits, '_' and '-' only`},
		{[]string{"--name", strings.Repeat("n", 41)}, "bytes; use at most 40"},
		{[]string{"--queue", "amqp", "--amqp", "http://guest:secret@127.0.0.1/"}, `lameduck: --amqp="http://REDACTED@127.0.0.1/": AMQP scheme must be either`},
		{[]string{"--queue", "postgres", "--postgres", "postgres://u:secret@127.0.0.1:5432/db?pool_max_conns=x"}, `lameduck: --postgres="postgres://REDACTED@127.0.0.1:5432/db?pool_max_conns=x": not a PostgreSQL URL or DSN`},
	} {
		cmd := exec.Command(lameduckBin, append([]string{"demo-worker"}, tc.args...)...)
		cmd.Env = childEnv(nil)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("demo-worker %s: %v; want exit 2\n%s", strings.Join(tc.args, " "), err, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("demo-worker %s said:\n%s\nwant %q", strings.Join(tc.args, " "), out, tc.want)
		}
		if strings.Contains(string(out), "secret") {
			t.Errorf("demo-worker %s printed a password:\n%s", strings.Join(tc.args, " "), out)
		}
	}
}

// A queue's server that does not answer stops the start with exit 1 and
// one ERROR line naming the flag, its value (password hidden) and the fix,
// before the probes ever turn ready.
func TestE2EWorkerUnreachableQueueExitsOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue", "amqp", "--amqp", "amqp://guest:secret@127.0.0.1:1/"},
			`lameduck: demo-worker: --amqp="amqp://REDACTED@127.0.0.1:1/": connecting to RabbitMQ: `},
		{[]string{"--queue", "postgres", "--postgres", "postgres://postgres:secret@127.0.0.1:1/test"},
			`lameduck: demo-worker: --postgres="postgres://REDACTED@127.0.0.1:1/test": connecting to PostgreSQL: `},
	} {
		p := startCmd(t, nil, append([]string{"demo-worker", "--log-format", "json", "--probe-addr", "127.0.0.1:0"}, tc.args...)...)
		if code, _ := p.waitExit(startTimeout); code != 1 {
			t.Fatalf("%v: exit %d; want 1\n%s", tc.args, code, p.output())
		}
		l, ok := p.findLog(func(l logLine) bool { return l.rec["level"] == "ERROR" })
		if !ok || !strings.HasPrefix(l.msg(), tc.want) || !strings.Contains(l.msg(), "; start ") ||
			strings.Contains(l.raw, "secret") || strings.Count(l.msg(), "lameduck: ") != 1 {
			t.Errorf("%v: the ERROR line is %s; want it to begin %q, say the fix once, and hide the password", tc.args, l.raw, tc.want)
		}
	}
}

// enqueue without --nats sends to a running demo-worker's embedded server;
// with none running it exits 1 and says to start one or pass --nats.
func TestE2EWorkerEnqueueWithoutEmbeddedServerSaysWhy(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing serves once closed
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(lameduckBin, "demo-worker", "enqueue", "--embedded-addr", addr, "--n", "1")
	cmd.Env = childEnv(nil)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("enqueue with no demo-worker: %v; want exit 1\n%s", err, out)
	}
	want := "no embedded NATS server answers on --embedded-addr=" + addr
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "start 'lameduck demo-worker' first, or pass --nats URL") {
		t.Errorf("enqueue with no demo-worker said:\n%s\nwant %q and the fix", out, want)
	}
}

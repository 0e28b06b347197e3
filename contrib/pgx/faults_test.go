package ldpgx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// victimPool is a pool to d through addr, its connections named app in
// pg_stat_activity. Its connections are never pinged on acquire: a test
// that loses answers on purpose must not have the ping lose them first.
func (d *db) victimPool(t testing.TB, addr, app string) *pgxpool.Pool {
	t.Helper()
	return newPoolShouldPing(t, d.dsnVia(t, addr, app), false)
}

// newPoolShouldPing returns a pool on dsn, closed by t's cleanup, that
// pings each connection before handing it out when ping is set, and never
// otherwise.
func newPoolShouldPing(t testing.TB, dsn string, ping bool) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return ping }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// terminate kills, at the server, every connection named app.
func (d *db) terminate(t testing.TB, app string) int {
	t.Helper()
	var n int
	if err := d.pool.QueryRow(testsupport.Context(t, long),
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A runner whose connections are killed mid-job (pg_terminate_backend)
// keeps its job: the pool reconnects and the lease is renewed. A runner
// cut off from PostgreSQL (its process stalled, its node lost) loses it
// when its lease expires: another runner claims it, its attempt counted,
// and the first runner's Ack, once it is back, changes nothing and says
// where the job went.
func TestLeaseExpiresAfterTheConnectionIsKilled(t *testing.T) {
	d := newDB(t)
	proxy := testsupport.NewProxy(t, "127.0.0.1:5432")
	app := "ldpgx-victim-" + randomHex(4)
	logs := new(testsupport.LogBuffer)
	victim := d.source(t, d.victimPool(t, proxy.Addr(), app), ldpgx.SourceConfig{Lease: time.Second, Logger: slogTo(logs)})
	rescuer := d.source(t, nil, ldpgx.SourceConfig{Lease: time.Second})
	d.enqueue(t, ldpgx.EnqueueJob{Key: "victim"})
	j := fetch(t, victim, time.Second)

	// Its connections killed: the lease is renewed on new ones.
	var killed time.Time
	if err := d.pool.QueryRow(testsupport.Context(t, long), "SELECT clock_timestamp()").Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if n := d.terminate(t, app); n == 0 {
		t.Fatal("the victim had no connection to kill")
	}
	eventually(t, "a renewal after the kill, on a new connection", func() bool {
		r := d.mustRow(t, "victim")
		return r.leaseUntil != nil && r.leaseUntil.After(killed.Add(time.Second))
	})
	if r := d.mustRow(t, "victim"); r.state != "running" || r.attempts != 1 {
		t.Fatalf("after the kill: %+v; want running, attempt 1", r)
	}

	// Cut off: no renewal gets through, and the lease expires.
	proxy.Cut()
	d.terminate(t, app)
	again := fetch(t, rescuer, long)
	if again.Key() != "victim" || again.Delivery() != 2 {
		t.Fatalf("the rescuer claimed %q delivery %d; want the victim's job, its second delivery", again.Key(), again.Delivery())
	}
	waitLog(t, logs, "renewing job victim's lease failed")

	proxy.Restore()
	err := j.Ack(testsupport.Context(t, long))
	if !errors.Is(err, ldpgx.ErrClaimLost) || !strings.Contains(err.Error(), "another runner claimed it after this delivery's lease ended") {
		t.Fatalf("the cut-off runner's Ack: %v; want ErrClaimLost, naming the runner that holds it", err)
	}
	if err := again.Ack(testsupport.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	if pending, dead := d.counts(t); pending != 0 || dead != 0 {
		t.Fatalf("%d pending, %d dead; want none", pending, dead)
	}
}

// A job whose lease expires during its last attempt (its runner died) is
// dead-lettered by the next claim, which says why; it is not delivered.
func TestLastLeaseExpiredIsDeadLettered(t *testing.T) {
	d := newDB(t)
	proxy := testsupport.NewProxy(t, "127.0.0.1:5432")
	app := "ldpgx-victim-" + randomHex(4)
	victim := d.source(t, d.victimPool(t, proxy.Addr(), app), ldpgx.SourceConfig{Lease: time.Second})
	logs := new(testsupport.LogBuffer)
	rescuer := d.source(t, nil, ldpgx.SourceConfig{Lease: time.Second, Logger: slogTo(logs)})
	d.enqueue(t, ldpgx.EnqueueJob{Key: "poison", MaxAttempts: 1}, ldpgx.EnqueueJob{Key: "next"})
	j := fetch(t, victim, time.Second)
	if j.Key() != "poison" || !j.LastAttempt() {
		t.Fatalf("claimed %q, last attempt %v; want poison at its last attempt", j.Key(), j.LastAttempt())
	}
	proxy.Cut() // as if the process died: nothing renews the lease
	d.terminate(t, app)
	// The rescuer takes "next" first (it is due); then, once the lease
	// expires, its claim meets the spent job, dead-letters it, and finds
	// nothing more.
	if n := fetch(t, rescuer, time.Second); n.Key() != "next" {
		t.Fatalf("claimed %q; want next", n.Key())
	} else if err := n.Ack(testsupport.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the spent job dead-lettered", func() bool {
		fetchNone(t, rescuer, 200*time.Millisecond, "the only job left is spent")
		return d.mustRow(t, "poison").state == "dead"
	})
	waitLog(t, logs, "job poison dead-lettered at its claim: its lease expired during its last attempt (1 of max_attempts 1)")
	if pending, dead := d.counts(t); pending != 0 || dead != 1 {
		t.Fatalf("%d pending, %d dead; want the spent job dead", pending, dead)
	}
	proxy.Restore()
	if err := j.HandBack(testsupport.Context(t, long), 0); !errors.Is(err, ldpgx.ErrClaimLost) || !strings.Contains(err.Error(), "it is dead, attempts 1 of 1") {
		t.Fatalf("the dead runner's late HandBack: %v; want ErrClaimLost, saying the job is dead", err)
	}
}

// A claim whose answer is lost (PostgreSQL ran it) is a fetch that ended
// in silence (worker.ErrNoReply); the Source remembers its token. While
// PostgreSQL cannot be reached, the Drain says the job is in the air and
// when its lease brings it back; once it can, the next Fetch hands the job
// back, its attempt not counted, and claims it again as a first delivery.
func TestAClaimWhoseAnswerIsLostIsReleased(t *testing.T) {
	d := newDB(t)
	m := testsupport.NewAnswerRelay(t, "127.0.0.1:5432") // once muted, a claim PostgreSQL runs has its answer lost
	proxy := testsupport.NewProxy(t, m.Addr())
	logs := new(testsupport.LogBuffer)
	src := d.source(t, d.victimPool(t, proxy.Addr(), ""), ldpgx.SourceConfig{Lease: time.Hour, ClaimTimeout: time.Second, Logger: slogTo(logs)})
	fetchNone(t, src, 0, "the table is empty (this opens the pool's connection)")
	d.enqueue(t, ldpgx.EnqueueJob{Key: "lost"})
	m.Mute(true)
	_, err := src.Fetch(testsupport.Context(t, long), 0)
	if !errors.Is(err, worker.ErrNoReply) || !strings.HasPrefix(err.Error(), "lameduck: ldpgx: ") {
		t.Fatalf("Fetch with its answer lost: %v; want an error wrapping worker.ErrNoReply", err)
	}
	eventually(t, "PostgreSQL to run the claim", func() bool { return d.mustRow(t, "lost").state == "running" })

	proxy.Cut()
	m.Mute(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = src.Drain(ctx)
	if err == nil || !strings.Contains(err.Error(), "1 claim(s) got no answer and could not be released") || !strings.Contains(err.Error(), "when their leases end") {
		t.Fatalf("Drain with the claim in the air and PostgreSQL unreachable: %v; want it to say so", err)
	}
	if r := d.mustRow(t, "lost"); r.state != "running" || r.attempts != 1 {
		t.Fatalf("while unreachable: %+v; want the lost claim's row running", r)
	}

	proxy.Restore()
	j := fetch(t, src, 10*time.Second)
	if j.Key() != "lost" || j.Delivery() != 1 {
		t.Fatalf("claimed %q delivery %d; want the lost job's first delivery (the lost claim is not counted)", j.Key(), j.Delivery())
	}
	waitLog(t, logs, "job lost had been claimed by a claim whose answer was lost; handed back, its attempt not counted")
	if err := j.Ack(testsupport.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	if err := src.Drain(ctx); err != nil {
		t.Fatalf("a clean Drain: %v", err)
	}
}

// A pool with no connection to give is not silence from the server: the
// Fetch's error says the pool is exhausted and what to raise, and does not
// wrap worker.ErrNoReply (which would count against liveness).
func TestAnExhaustedPoolIsNamed(t *testing.T) {
	d := newDB(t)
	pool := newPool(t, d.dsnVia(t, "", "")+"&pool_max_conns=1")
	held, err := pool.Acquire(testsupport.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	src := d.source(t, pool, ldpgx.SourceConfig{Lease: time.Second})
	_, err = src.Fetch(testsupport.Context(t, long), 0)
	if err == nil || errors.Is(err, worker.ErrNoReply) || !strings.Contains(err.Error(), "no connection was free for ClaimTimeout 500ms (MaxConns 1, all in use); raise the pool's MaxConns") {
		t.Fatalf("Fetch with the pool exhausted: %v; want an error naming the pool, not ErrNoReply", err)
	}
}

// Regression test, kept from a hostile review's reproduction, which failed before the fix it names
// below; it passes now. The original text follows.
//
// Reproduction: a claim whose answer is lost (PostgreSQL ran it; the reply came
// after ClaimTimeout) is recorded as an orphan to be released, but
// Source.releaseOrphans DROPS every orphan older than the Lease without
// releasing it ("Claims whose lease has ended are dropped first (their rows are
// claimable again)"). The row is claimable again, but with the lost claim's
// attempt COUNTED: at max_attempts the next claim moves it to the dead state.
// So a job that no handler ever ran is dead-lettered, and the log blames a
// runner that "stopped renewing (killed, or cut off from PostgreSQL)" although
// no runner ever held it. The same happens in production with the defaults
// (Lease 30s, ClaimTimeout 5s) whenever the link stalls for longer than the
// lease right after a claim ran (every releaseOrphans in between times out
// too). Contradicts SourceConfig.ClaimTimeout's doc ("if PostgreSQL ran it
// anyway its job is released by the next Fetch or the Drain, or at worst comes
// back when its lease expires") and EnqueueJob.MaxAttempts ("the runner's own
// hand-backs ... never count").
//
// Copy to: contrib/pgx/zz_hostile_lostclaim/lostclaim_test.go in a clone
// (package zzhostilelostclaim_test). Needs PostgreSQL at 127.0.0.1:5432 (db
// test, user postgres, trust).
// Run:     cd contrib/pgx && go test -count=1 -run TestHostileLostClaimDead -v ./zz_hostile_lostclaim/
//
// The link is modelled by a proxy in the file that delays only PostgreSQL's
// answers (700ms, while the claim's own request goes through at once), for
// about 1.5 Lease; the pool has 2 connections (the listener's and one the
// warm-up claim has prepared its statement on, pgx's default exec mode).
//
// On the current code it prints (FAIL, 3 of 3 runs, ~6.5s):
//
//	lostclaim_test.go:197: slow link: fetch 1: <nil> lameduck: ldpgx: fetching from hostile_lostclaim_NNN: claiming: no answer
//	  within ClaimTimeout 500ms (if PostgreSQL ran the claim, its job is released by the next Fetch or at the latest when its
//	  lease ends): worker: no reply from the queue server: ...; row now state=running attempts=1
//	lostclaim_test.go:231: job "victim" (max_attempts 1) never reached a handler, yet it is state=dead attempts=1; Source log:
//	  ["... level=WARN msg=\"lameduck: ldpgx: job victim dead-lettered at its claim: its lease expired during its last attempt
//	  (1 of max_attempts 1), so the runner that held it stopped renewing (killed, or cut off from PostgreSQL); it is not
//	  delivered again\" ..."]
//
// Fixed: a lost claim's row is released (or its attempt refunded) even after
// the lease, or the claim does not count an attempt until it is delivered;
// the job is returned by a later Fetch: PASS.
package lostclaim_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

type sink struct {
	mu    sync.Mutex
	lines []string
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.lines = append(s.lines, strings.TrimSpace(string(p)))
	s.mu.Unlock()
	return len(p), nil
}

func TestHostileLostClaimDead(t *testing.T) {
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	table := fmt.Sprintf("hostile_lostclaim_%d", os.Getpid())
	if err := ldpgx.CreateTable(ctx, admin, table); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(ctx, "DROP TABLE IF EXISTS "+table)
	state := func() string {
		var st string
		var attempts int
		if err := admin.QueryRow(ctx, "SELECT state, attempts FROM "+table+" WHERE key = 'victim'").Scan(&st, &attempts); err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("state=%s attempts=%d", st, attempts)
	}

	// Only the server's answers are delayed: the request reaches PostgreSQL
	// at once, the reply is late, as on a congested return path.
	relay := testsupport.NewAnswerRelay(t, "127.0.0.1:5432")
	pool, err := pgxpool.New(ctx, "postgres://postgres@"+relay.Addr()+"/test?sslmode=disable&pool_max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	log := &sink{}
	src, err := ldpgx.NewSource(pool, ldpgx.SourceConfig{Table: table, Lease: time.Second, ClaimTimeout: 500 * time.Millisecond,
		Poll: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Drain(ctx)

	// Warm the pool: the listener takes one connection for good; the claim
	// must find another one ready, as it would on a busy runner.
	if _, err := src.Fetch(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var held []*pgxpool.Conn
	for i := 0; i < 1; i++ {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	if err := ldpgx.Enqueue(ctx, admin, table, ldpgx.EnqueueJob{Key: "victim", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	relay.SetDelay(700 * time.Millisecond) // the claim reaches PostgreSQL and runs; its answer comes after ClaimTimeout
	j, err := src.Fetch(ctx, 100*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	t.Logf("slow link: fetch 1: %v %v; row now %s", j, err, state())
	if j != nil || !errors.Is(err, worker.ErrNoReply) {
		t.Fatalf("setup: expected a claim with no reply, got job %v, error %v", j, err)
	}
	// The loop goes on fetching (each fails: the link is still slow) for a
	// little more than the lease.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
		j, err := src.Fetch(ctx, 100*time.Millisecond)
		if j != nil {
			t.Fatalf("unexpected job during the stall: %s", j.ID())
		}
		_ = err
		time.Sleep(100 * time.Millisecond)
	}
	relay.SetDelay(0)
	time.Sleep(800 * time.Millisecond) // chunks already queued drain
	var got worker.Job
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && got == nil; {
		got, _ = src.Fetch(ctx, 200*time.Millisecond)
	}
	if got != nil {
		t.Logf("the job came back: %s (delivery %d)", got.ID(), got.(*ldpgx.Job).Delivery())
		_ = got.Ack(ctx)
		return
	}
	log.mu.Lock()
	lines := append([]string(nil), log.lines...)
	log.mu.Unlock()
	var dead []string
	for _, l := range lines {
		if strings.Contains(l, "dead-lettered") || strings.Contains(l, "handed back") {
			dead = append(dead, l)
		}
	}
	t.Fatalf("job %q (max_attempts 1) never reached a handler, yet it is %s; Source log: %q", "victim", state(), dead)
}

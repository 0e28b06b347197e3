package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/worker"
)

// demoTable is the demo worker's jobs table for the queue named q (--name,
// "demo"): lameduck_<q>_jobs, in the search_path's first schema.
func demoTable(q string) string { return "lameduck_" + q + "_jobs" }

// demoEpochTable is the table of --epoch-source table: one row per runner
// alive, every fleet (--name) in one table.
const demoEpochTable = "lameduck_epochs"

// postgresPool returns a pool on url, with conns connections unless url
// sets pool_max_conns and a 5s connect timeout unless it sets one, once
// PostgreSQL has answered a ping (so a wrong address fails the start, not
// every fetch).
func postgresPool(ctx context.Context, url string, conns int) (*pgxpool.Pool, error) {
	shown := health.Redact(url)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil { // validate has parsed it already
		return nil, fmt.Errorf("--postgres=%q: %w", shown, err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(conns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--postgres=%q: connecting to PostgreSQL: %w; start PostgreSQL there, or give its URL", shown, err)
	}
	return pool, nil
}

// openPostgres connects the demo worker to PostgreSQL at --postgres (a pool
// of --loops + 2 connections: each loop's claim, renewal and settlement,
// and room), creates its jobs table with ldpgx.CreateTable, and returns
// the queue: an ldpgx.Source whose lease is --ack-wait, and the epoch
// table or static epochs. The closers it registers run in reverse: the
// epoch row is deleted, then the pool closed. On an error it undoes what
// it did.
func openPostgres(ctx context.Context, o workerOptions, lc *lameduck.Lifecycle, log *slog.Logger) (q demoQueue, err error) {
	var undo undoer
	defer undo.onError(&err)
	shown := health.Redact(o.postgresURL)
	pool, err := postgresPool(ctx, o.postgresURL, o.loops+2)
	if err != nil {
		return q, demoErrorf("lameduck: demo-worker: %w", err)
	}
	undo = append(undo, pool.Close)
	table := demoTable(o.name)
	if err := ldpgx.CreateTable(ctx, pool, table); err != nil {
		return q, demoErrorf("lameduck: demo-worker: --postgres=%q: %w", shown, err)
	}
	src, err := ldpgx.NewSource(pool, ldpgx.SourceConfig{Table: table, Lease: o.ackWait, Logger: log})
	if err != nil {
		return q, demoErrorf("lameduck: demo-worker: --ack-wait=%s: %w", o.ackWait, err)
	}
	if err := lc.AddCloser("PostgreSQL pool", func(context.Context) error { pool.Close(); return nil }); err != nil {
		return q, err
	}
	q.epochs, err = openEpochs(lc, o, "table", "epoch row", fmt.Sprintf(" at --postgres=%q", shown), func(draining func() bool) (publishedEpochs, error) {
		return newPGEpochs(ctx, pool, o.name, o.epochPoll, draining)
	})
	if err != nil {
		return q, err
	}
	q.src = src
	q.job = func(j worker.Job) *countedJob {
		pj := j.(*ldpgx.Job)
		return &countedJob{Job: pj, body: pj.Payload()}
	}
	q.attrs = []any{"postgres", shown, "table", table, "lease", src.Lease().String(), "renew_every", (src.Lease() / 3).String()}
	return q, nil
}

// enqueuePostgres inserts jobs into the table of --name at --postgres, in
// one statement (they are all enqueued, or none), each job's id its row's
// key, after creating the table if it does not exist.
func enqueuePostgres(ctx context.Context, o workerOptions, jobs []demoJob) (string, error) {
	shown := health.Redact(o.postgresURL)
	pool, err := postgresPool(ctx, o.postgresURL, 1)
	if err != nil {
		return "", demoErrorf("lameduck: demo-worker enqueue: %w", err)
	}
	defer pool.Close()
	table := demoTable(o.name)
	// Only when the table is missing: ldpgx.CreateTable on an existing
	// table still takes a lock that waits behind any open transaction on
	// it, and every runner's claim, renewal and ack then waits behind that.
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{table}.Sanitize()).Scan(&exists); err != nil {
		return "", demoErrorf("lameduck: demo-worker enqueue: --postgres=%q: looking up table %s: %w", shown, table, err)
	}
	if !exists {
		if err := ldpgx.CreateTable(ctx, pool, table); err != nil {
			return "", demoErrorf("lameduck: demo-worker enqueue: --postgres=%q: %w", shown, err)
		}
	}
	rows := make([]ldpgx.EnqueueJob, len(jobs))
	for i, j := range jobs {
		body, _ := json.Marshal(j)
		rows[i] = ldpgx.EnqueueJob{Key: j.ID, Payload: body}
	}
	if err := ldpgx.Enqueue(ctx, pool, table, rows...); err != nil {
		return "", demoErrorf("lameduck: demo-worker enqueue: --postgres=%q: %w", shown, err)
	}
	return shown + " table " + table, nil
}

// pgEpochs is the demo worker's worker.EpochSource on PostgreSQL
// (--epoch-source table): the table lameduck_epochs holds one row per
// runner alive, (fleet, runner, epoch, poll, put_at), that its runner puts
// again at every poll. The newest epoch is the largest among the rows of
// the fleet (--name) that are fresh: a row last put more than three of its
// runner's polls before the asking runner's own put is stale, and the
// asking runner deletes it, both times PostgreSQL's now(), so the pods'
// clocks do not matter. A runner deletes its own row at its first poll
// after the signal (it takes no new job, so it supersedes no one) and at
// exit (Retire): after a rollback the older fleet is no longer superseded
// within a poll, or three polls after a runner killed without a drain.
//
// Safe for concurrent use.
type pgEpochs struct {
	pool     *pgxpool.Pool
	fleet    string
	runner   string        // this runner's id: random
	poll     time.Duration // this runner's poll, stored with its row
	draining func() bool

	mu      sync.Mutex
	retired bool // guarded by mu: the row is deleted for good
}

// staleEpochPolls is how many of its polls a runner may miss before its row
// stops counting.
const staleEpochPolls = 3

// newPGEpochs creates the epoch table unless it exists (under an advisory
// lock: runners starting together) and returns this runner's pgEpochs. It
// puts nothing yet: the first Newest does.
func newPGEpochs(ctx context.Context, pool *pgxpool.Pool, fleet string, poll time.Duration, draining func() bool) (*pgEpochs, error) {
	if poll <= 0 {
		poll = worker.DefaultEpochPoll
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('lameduck demo-worker epochs'))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+demoEpochTable+` (
	fleet  text NOT NULL,
	runner text NOT NULL,
	epoch  bigint NOT NULL CHECK (epoch >= 0),
	poll   interval NOT NULL,
	put_at timestamptz NOT NULL,
	PRIMARY KEY (fleet, runner)
)`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating table %s: %w", demoEpochTable, err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand's contract)
	return &pgEpochs{pool: pool, fleet: fleet, runner: hex.EncodeToString(id[:]), poll: poll, draining: draining}, nil
}

// Newest puts this runner's row (or deletes it once the runner drains),
// deletes the fleet's stale rows, and returns the largest epoch among the
// rows left, mine when none is left: one transaction, so every time in it
// is the same now().
func (e *pgEpochs) Newest(ctx context.Context, mine uint64) (uint64, error) {
	if mine > math.MaxInt64 {
		return 0, demoErrorf("lameduck: demo-worker: epoch table: LAMEDUCK_EPOCH=%d does not fit PostgreSQL's bigint; use at most %d", mine, int64(math.MaxInt64))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var newest int64
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		if e.retired || e.draining() {
			_, err = tx.Exec(ctx, `DELETE FROM `+demoEpochTable+` WHERE fleet = $1 AND runner = $2`, e.fleet, e.runner)
		} else {
			_, err = tx.Exec(ctx, `INSERT INTO `+demoEpochTable+` (fleet, runner, epoch, poll, put_at)
VALUES ($1, $2, $3, $4 * interval '1 microsecond', now())
ON CONFLICT (fleet, runner) DO UPDATE SET epoch = EXCLUDED.epoch, poll = EXCLUDED.poll, put_at = EXCLUDED.put_at`,
				e.fleet, e.runner, int64(mine), e.poll.Microseconds())
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+demoEpochTable+` WHERE fleet = $1 AND put_at < now() - $2 * poll`,
			e.fleet, staleEpochPolls); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT coalesce(max(epoch), $2) FROM `+demoEpochTable+` WHERE fleet = $1`, e.fleet, int64(mine)).Scan(&newest)
	})
	if err != nil {
		return 0, demoErrorf("lameduck: demo-worker: epoch table %s: %w", demoEpochTable, err)
	}
	return uint64(newest), nil
}

// Retire deletes this runner's row for good, so the runners left stop
// counting it at once; a later Newest puts it no more. It is the demo's
// closer, run before the pool's.
func (e *pgEpochs) Retire(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.retired = true
	if _, err := e.pool.Exec(ctx, `DELETE FROM `+demoEpochTable+` WHERE fleet = $1 AND runner = $2`, e.fleet, e.runner); err != nil {
		return demoErrorf("lameduck: demo-worker: epoch table %s: deleting this runner's row: %w; the runners left stop counting it after %d of its polls (%s)",
			demoEpochTable, err, staleEpochPolls, staleEpochPolls*e.poll)
	}
	return nil
}

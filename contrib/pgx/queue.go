package ldpgx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultTable is the jobs table of a [SourceConfig], [CreateTable] and
// [Enqueue] given an empty name: lameduck_jobs, in the first schema of the
// connection's search_path.
const DefaultTable = "lameduck_jobs"

// DefaultMaxAttempts is how many times a job is delivered before its
// failures move it to the dead state, unless [EnqueueJob.MaxAttempts] says
// otherwise. It is also the column's default, for rows a producer inserts
// without [Enqueue].
const DefaultMaxAttempts = 25

// maxIdent is PostgreSQL's longest identifier, in bytes (NAMEDATALEN − 1);
// a longer one is truncated without a word, so it is refused here instead.
const maxIdent = 63

// indexSuffix names the table's claim index: <table>_next_idx.
const indexSuffix = "_next_idx"

// DB is where [CreateTable] and [Enqueue] run their statements: a
// *pgxpool.Pool, a *pgxpool.Conn, a *pgx.Conn, or a pgx.Tx (the
// producer's own transaction, so that a job is enqueued if and only if
// the transaction commits).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// table is a parsed, quoted table name.
type table struct {
	name   string // as configured (DefaultTable when empty)
	schema string // "" when unqualified
	rel    string // the table's last part
	quoted string // "schema"."rel" or "rel", ready for SQL
	index  string // the claim index's name, quoted (unqualified: an index lives in its table's schema)
	fn     string // the notify function, quoted and qualified like the table
}

// parseTable checks a table name as a setting: empty means DefaultTable;
// "name" or "schema.name", each part taken literally (it is quoted, so
// Jobs and jobs are two tables), at most 63 bytes for the schema and 54
// for the name (its index is <name>_next_idx).
func parseTable(setting, name string) (table, error) {
	if name == "" {
		name = DefaultTable
	}
	bad := func(why string) (table, error) {
		return table{}, fmt.Errorf("lameduck: ldpgx: %s=%q %s; use \"name\" or \"schema.name\" (for example %q)", setting, name, why, DefaultTable)
	}
	parts := strings.Split(name, ".")
	switch {
	case len(parts) > 2:
		return bad("has more than one dot")
	case strings.ContainsRune(name, 0):
		return bad("contains a NUL byte")
	}
	for _, p := range parts {
		if p == "" {
			return bad("has an empty part")
		}
	}
	t := table{name: name, rel: parts[len(parts)-1]}
	if len(parts) == 2 {
		t.schema = parts[0]
		if len(t.schema) > maxIdent {
			return bad(fmt.Sprintf("has a schema of %d bytes, longer than PostgreSQL's %d", len(t.schema), maxIdent))
		}
	}
	if n := len(t.rel) + len(indexSuffix); n > maxIdent {
		return bad(fmt.Sprintf("has a table name of %d bytes; its index %s%s would be longer than PostgreSQL's %d", len(t.rel), t.rel, indexSuffix, maxIdent))
	}
	if t.schema != "" {
		t.quoted = pgx.Identifier{t.schema, t.rel}.Sanitize()
		t.fn = pgx.Identifier{t.schema, "ldpgx_notify"}.Sanitize()
	} else {
		t.quoted = pgx.Identifier{t.rel}.Sanitize()
		t.fn = pgx.Identifier{"ldpgx_notify"}.Sanitize()
	}
	t.index = pgx.Identifier{t.rel + indexSuffix}.Sanitize()
	return t, nil
}

// channelSQL is the expression of a table's notification channel, from its
// schema and name as PostgreSQL resolved them: the trigger and the
// listener compute it alike, so "jobs" and "public.jobs" meet. hashtext
// keeps it under the 63 bytes of a channel name, whatever the table's; a
// collision between two tables only wakes a listener for nothing.
const channelSQL = `'ldpgx_' || hashtext(%s || '.' || %s)`

// createLockSQL serialises CreateTable across processes (several runners
// starting at once): CREATE … IF NOT EXISTS is not safe against a
// concurrent twin.
const createLockSQL = `SELECT pg_advisory_xact_lock(hashtext('lameduck ldpgx CreateTable'))`

// CreateTable creates the jobs table called name (see
// [SourceConfig].Table; empty means [DefaultTable]), its claim index
// (<name>_next_idx, on next_at and id, of the rows not dead) and its
// notify trigger, in one transaction, unless they exist: it is safe to call at every start,
// from every replica at once (an advisory lock serialises the callers),
// and it changes nothing in a table that exists. db is a pool, a
// connection or a transaction (CreateTable then uses a savepoint).
//
// The table, with what each column means (docs/postgres.md, "The table"):
//
//	id           bigint identity primary key: the claim order's tie-break, and the row's handle
//	key          text: the producer's name for the job, its ID in the runner's logs (may be NULL)
//	payload      bytea: the job's data, for the handler
//	state        'ready' (waiting for run_at), 'running' (claimed, under a lease) or 'dead' (failed max_attempts times)
//	attempts     deliveries so far: counted at each claim, refunded when the runner hands the job back for its own reason
//	max_attempts deliveries after which a failure moves the job to 'dead'
//	run_at       when a ready job is due
//	lease_until  when a running job's lease ends, unless renewed; then it may be claimed again
//	claim        the claim token of the runner holding the job (NULL unless running)
//	enqueued_at  when it was enqueued
//	next_at      generated: lease_until while running, run_at otherwise; the claim's order
//
// The trigger, on every insert and every update of state or run_at that
// leaves a row ready, sends pg_notify on the table's channel, so a runner
// waiting in Fetch claims at once (at the producer's commit); the
// function ldpgx_notify is created in the table's schema.
//
// Errors: a malformed table name (naming it and the fix) before any I/O;
// otherwise "lameduck: ldpgx: CreateTable(<name>): " and PostgreSQL's error.
func CreateTable(ctx context.Context, db DB, name string) error {
	t, err := parseTable("CreateTable's table", name)
	if err != nil {
		return err
	}
	// Checked first, outside any lock: DROP/CREATE TRIGGER would take a
	// SHARE ROW EXCLUSIVE lock on the table and wait behind every open
	// transaction that wrote to it (a producer's), while a runner's start
	// waited behind it.
	if ok, err := tableReady(ctx, db, t); err != nil {
		return fmt.Errorf("lameduck: ldpgx: CreateTable(%q): %w", t.name, err)
	} else if ok {
		return nil
	}
	stmts := []string{
		createLockSQL,
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key          text,
	payload      bytea NOT NULL DEFAULT '\x',
	state        text NOT NULL DEFAULT 'ready' CHECK (state IN ('ready', 'running', 'dead')),
	attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
	max_attempts integer NOT NULL DEFAULT %d CHECK (max_attempts >= 1),
	run_at       timestamptz NOT NULL DEFAULT now(),
	lease_until  timestamptz,
	claim        uuid,
	enqueued_at  timestamptz NOT NULL DEFAULT now(),
	next_at      timestamptz GENERATED ALWAYS AS (CASE WHEN state = 'running' THEN lease_until ELSE run_at END) STORED,
	CHECK ((state = 'running') = (claim IS NOT NULL AND lease_until IS NOT NULL))
)`, t.quoted, DefaultMaxAttempts),
		fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (next_at, id) WHERE state <> 'dead'`, t.index, t.quoted),
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify(%s, '');
	RETURN NULL;
END
$$`, t.fn, fmt.Sprintf(channelSQL, "TG_TABLE_SCHEMA", "TG_TABLE_NAME")),
	}
	trigger := fmt.Sprintf(`CREATE TRIGGER ldpgx_notify AFTER INSERT OR UPDATE OF state, run_at ON %s
	FOR EACH ROW WHEN (NEW.state = 'ready') EXECUTE FUNCTION %s()`, t.quoted, t.fn)
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		var has bool
		if err := tx.QueryRow(ctx, hasTriggerSQL, t.quoted).Scan(&has); err != nil || has {
			return err
		}
		_, err := tx.Exec(ctx, trigger)
		return err
	})
	if err != nil {
		return fmt.Errorf("lameduck: ldpgx: CreateTable(%q): %w", t.name, err)
	}
	return nil
}

// hasTriggerSQL says whether the table $1 (quoted, resolved by the
// search_path as CREATE TABLE resolves it) has the notify trigger.
const hasTriggerSQL = `SELECT EXISTS (SELECT 1 FROM pg_trigger
	WHERE tgrelid = to_regclass($1) AND tgname = 'ldpgx_notify' AND NOT tgisinternal)`

// tableReadySQL says whether the table $1 (quoted), its claim index $2
// (unquoted) and its notify trigger all exist, reading only the catalogs.
const tableReadySQL = `SELECT to_regclass($1) IS NOT NULL
	AND EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = to_regclass($1) AND c.relname = $2)
	AND EXISTS (SELECT 1 FROM pg_trigger
		WHERE tgrelid = to_regclass($1) AND tgname = 'ldpgx_notify' AND NOT tgisinternal)`

// tableReady says whether t, its claim index and its notify trigger all
// exist; it takes no lock on the table.
func tableReady(ctx context.Context, db DB, t table) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, tableReadySQL, t.quoted, t.rel+indexSuffix).Scan(&ok)
	return ok, err
}

// EnqueueJob is one job for [Enqueue].
type EnqueueJob struct {
	// Key names the job: the runner's logs and probe bodies show it as
	// the job's ID (see SourceConfig.ID). It may be empty; it need not be
	// unique (add a unique index of your own to make it so).
	Key string
	// Payload is the job's data, stored as bytea; nil is stored empty.
	Payload []byte
	// Delay, a time.Duration, is how long after the transaction's start
	// (PostgreSQL's now()) the job is due: zero means at once (at the
	// commit, for a job enqueued inside a transaction). Negative is an
	// error.
	Delay time.Duration
	// MaxAttempts is how many deliveries the job may fail before it moves
	// to the dead state; the runner's own hand-backs (a drain, the drain
	// bound) never count. Zero means DefaultMaxAttempts (25); negative is
	// an error.
	MaxAttempts int
}

// Enqueue inserts jobs into the table called table (empty means
// [DefaultTable]) in one statement. Run it on the producer's own
// transaction (a pgx.Tx) to enqueue the jobs if and only if the
// transaction commits: the runners are notified at the commit, by the
// table's trigger, and claim them at once. Enqueueing nothing does
// nothing.
//
// Errors: a malformed table name, a negative Delay or MaxAttempts (each
// naming the job's index, its key, the value and the fix) before any I/O;
// otherwise "lameduck: ldpgx: Enqueue(<name>): " and PostgreSQL's error
// (42P01 when the table does not exist: call [CreateTable] first). db may
// be shared by goroutines as far as it allows itself (a pool does; a
// connection or a transaction does not).
func Enqueue(ctx context.Context, db DB, table string, jobs ...EnqueueJob) error {
	t, err := parseTable("Enqueue's table", table)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	keys := make([]*string, len(jobs))
	payloads := make([][]byte, len(jobs))
	delays := make([]int64, len(jobs))
	maxes := make([]int32, len(jobs))
	for i, j := range jobs {
		switch {
		case j.Delay < 0:
			return fmt.Errorf("lameduck: ldpgx: Enqueue: jobs[%d] (key %q): Delay=%s is negative; use 0 for at once", i, j.Key, j.Delay)
		case j.MaxAttempts < 0:
			return fmt.Errorf("lameduck: ldpgx: Enqueue: jobs[%d] (key %q): MaxAttempts=%d is negative; use 0 for DefaultMaxAttempts (%d), or at least 1", i, j.Key, j.MaxAttempts, DefaultMaxAttempts)
		case j.MaxAttempts > 1<<31-1:
			return fmt.Errorf("lameduck: ldpgx: Enqueue: jobs[%d] (key %q): MaxAttempts=%d does not fit the integer column; use at most %d", i, j.Key, j.MaxAttempts, 1<<31-1)
		}
		if j.Key != "" {
			keys[i] = &j.Key
		}
		payloads[i] = j.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		delays[i] = j.Delay.Microseconds()
		maxes[i] = int32(j.MaxAttempts)
		if maxes[i] == 0 {
			maxes[i] = DefaultMaxAttempts
		}
	}
	sql := fmt.Sprintf(`INSERT INTO %s (key, payload, run_at, max_attempts)
SELECT k, p, now() + d * interval '1 microsecond', m
FROM unnest($1::text[], $2::bytea[], $3::bigint[], $4::integer[]) WITH ORDINALITY AS j(k, p, d, m, n)
ORDER BY n`, t.quoted)
	if _, err := db.Exec(ctx, sql, keys, payloads, delays, maxes); err != nil {
		return fmt.Errorf("lameduck: ldpgx: Enqueue(%q): %w%s", t.name, err, missingTable(err))
	}
	return nil
}

// missingTable is the hint an error gets when the table does not exist.
func missingTable(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42P01" {
		return " (create the table with ldpgx.CreateTable)"
	}
	return ""
}

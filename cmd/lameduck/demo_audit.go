package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// auditTable is the table --audit-postgres writes to. Its rows are
// (request_id, pod, method, path, at); the cluster suite counts them.
const auditTable = "lameduck_audit"

// auditTimeout bounds one audit row's INSERT: a write that cannot finish
// in it is logged as failed, by name, and the join moves on.
const auditTimeout = 5 * time.Second

// audit records a row in PostgreSQL for every 2xx answer to GET / and
// POST /echo, through Lifecycle.GoWrite after the answer is decided: the
// best-effort write behind a request that a rolling update must not lose
// (the row is written after the client has its answer, so only the
// background join can save it). The row is named by the request's
// X-Request-Id header.
type audit struct {
	lc   *lameduck.Lifecycle
	pool *pgxpool.Pool
	pod  string
}

// newAudit connects lazily to dsn, creates the audit table as a startup
// task (retried until LAMEDUCK_STARTUP_TIMEOUT: the pod is not ready
// before its table exists), and closes the pool after the background
// join. The error names the flag and the value, credentials hidden.
func newAudit(lc *lameduck.Lifecycle, dsn string) (*audit, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usageError{fmt.Errorf("--audit-postgres=%q: %w; give a PostgreSQL URL such as postgres://user@host:5432/db", health.Redact(dsn), err)}
	}
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects lazily
	if err != nil {
		return nil, usageError{fmt.Errorf("--audit-postgres=%q: %w", health.Redact(dsn), err)}
	}
	pod, _ := os.Hostname()
	a := &audit{lc: lc, pool: pool, pod: pod}
	err = errors.Join(
		lc.AddStartupTask("create the audit table", a.createTable, lameduck.Retry{}),
		lc.AddCloser("audit pool", func(context.Context) error { pool.Close(); return nil }),
	)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return a, nil
}

// createTable creates the audit table if it is missing. Pods starting
// together may race on the catalog (a unique violation on pg_type); the
// startup task's retry then finds the table made.
func (a *audit) createTable(ctx context.Context) error {
	_, err := a.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+auditTable+` (
		request_id text NOT NULL,
		pod text NOT NULL,
		method text NOT NULL,
		path text NOT NULL,
		at timestamptz NOT NULL DEFAULT now())`)
	return err
}

// record starts the audit row of r's answer when code is 2xx and returns
// the code and body to send: unchanged, or 503 with the reason when the
// write is refused (the Lifecycle has joined its background work: no row
// could follow, so the request is not answered as done). A nil audit
// records nothing. It is safe for concurrent use.
func (a *audit) record(r *http.Request, code int, body any) (int, any) {
	if a == nil || code < 200 || code > 299 {
		return code, body
	}
	id, method, path := r.Header.Get("X-Request-Id"), r.Method, r.URL.Path
	err := a.lc.GoWrite("audit-row", auditTimeout, func(ctx context.Context) error {
		_, err := a.pool.Exec(ctx, `INSERT INTO `+auditTable+` (request_id, pod, method, path) VALUES ($1, $2, $3, $4)`,
			id, a.pod, method, path)
		return err
	})
	if err != nil {
		return http.StatusServiceUnavailable, map[string]any{"error": err.Error(),
			"reason": "the audit row could not be recorded: the pod is shutting down"}
	}
	return code, body
}

// Package ldpgx is lameduck's PostgreSQL integration, through a pgx v5
// pool (github.com/jackc/pgx/v5/pgxpool): a readiness check of the pool
// ([Check]), and a job source for runners ([Source], a worker.Source): a
// jobs table ([CreateTable]) that producers fill in their own
// transactions ([Enqueue]) and runners claim one row at a time with FOR
// UPDATE SKIP LOCKED, under a lease renewed while the job runs.
//
// Import it as
//
//	import ldpgx "github.com/lameduck/lameduck/contrib/pgx"
//
// A service on database/sql (pgx's stdlib driver, lib/pq) checks its
// database with checks.SQLPing from the core instead. This is a module of
// its own, so importing it pulls pgx and nothing else beyond lameduck's
// standard-library core. The operator's page is docs/postgres.md in the
// lameduck repository.
package ldpgx

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck/health"
)

// Check returns spec with its Func set to a ping of pool: spec carries the
// name, Critical and Timeout (see health.Check), and any Func it holds is
// replaced. Register the result with Lifecycle.AddCheck.
//
// The ping is pgxpool.Pool.Ping: it acquires a connection from the pool
// (dialling only when no idle connection is left, never once per probe),
// sends an empty statement and waits for the answer, all under the probe's
// context. pgx's default context handling sets a deadline on the socket
// when the context ends, so a server that accepts and never answers is
// reported "timeout" at the check's deadline and the connection is
// discarded; the next probe pings afresh. Set a connect timeout on the
// pool (connect_timeout=2 in the DSN, or ConnConfig.ConnectTimeout): the
// pool finishes a connect it started for a probe even after the probe has
// left, and without a timeout a connect to a server that never answers
// holds a goroutine of the pool's (up to MaxConns of them) for good.
//
// Errors: "lameduck: postgres ping: " and pgx's error, with the pool's
// password, if it appears, replaced by REDACTED. The user name and the
// database of pgx's "failed to connect to `user=... database=...`" are
// kept: they are not secrets, and they tell an operator which role failed
// (docs/postgres.md, "What reaches the body"). The health engine also
// redacts the usual credential shapes (URL user-info, password= pairs,
// tokens) before a body shows the text. A nil pool
// makes every call return an error saying so. Safe for concurrent use, as
// pool is.
func Check(spec health.Check, pool *pgxpool.Pool) health.Check {
	if pool == nil {
		err := fmt.Errorf("lameduck: ldpgx.Check(%q): the pool is nil; pass the *pgxpool.Pool the application uses", spec.Name)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	password := pool.Config().ConnConfig.Password
	spec.Func = func(ctx context.Context) error {
		if err := pool.Ping(ctx); err != nil {
			return &pingError{err: err, password: password}
		}
		return nil
	}
	return spec
}

// pingError is a ping's error with the password cut out of its text. It
// wraps pgx's error, so errors.Is and errors.As (context.DeadlineExceeded,
// *pgconn.PgError) still see it.
type pingError struct {
	err      error
	password string
}

func (e *pingError) Error() string {
	s := e.err.Error()
	if e.password != "" {
		s = strings.ReplaceAll(s, e.password, "REDACTED")
	}
	return "lameduck: postgres ping: " + s
}

func (e *pingError) Unwrap() error { return e.err }

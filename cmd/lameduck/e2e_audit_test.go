package main

// End-to-end test of `lameduck demo --audit-postgres` on the real binary and
// the machine's PostgreSQL: every request answered 2xx has its audit row,
// written in the background after the answer, when the process exits at
// SIGTERM — and the same test, with the join given no time, sees the rows
// go missing.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// auditSchema makes a schema of its own for one test on the machine's
// PostgreSQL, dropped when the test ends, and returns a DSN whose
// search_path puts the demo's audit table in it, and a pool on it.
func auditSchema(t *testing.T) (dsn string, conn func() *pgx.Conn) {
	t.Helper()
	base := testsupport.Postgres.Addr()
	pool := testPool(t, base)
	schema := "ld_audit_" + strings.ReplaceAll(testQueueName(), "-", "_")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	dsn = base + sep + "search_path=" + schema
	return dsn, func() *pgx.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connecting to %s: %v", testsupport.Postgres.Name, err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
}

// auditRun is one demo process with --audit-postgres: requests sent before
// and in the window while the test holds a lock that blocks every INSERT
// into the audit table, released only once the process has answered its
// last request and begun the join (or has exited, when holdPastExit).
type auditRun struct {
	answered, rows int
}

func runAudit(t *testing.T, dsn string, conn func() *pgx.Conn, env map[string]string, holdPastExit bool) auditRun {
	t.Helper()
	p := startDemo(t, env, "--log-format", "json", "--audit-postgres", dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock := conn()
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE "+auditTable+" IN SHARE MODE"); err != nil { // INSERT waits
		t.Fatal(err)
	}
	c := newClient(t, true)
	var (
		mu       sync.Mutex
		answered int
		n        int
	)
	send := func(count int) {
		var wg sync.WaitGroup
		for range count {
			n++
			id := fmt.Sprintf("req-%d", n)
			wg.Go(func() {
				r, err := p.doHeader(ctx, c, "/", map[string]string{"X-Request-Id": id})
				if err != nil {
					t.Errorf("GET / (%s): %v", id, err)
					return
				}
				if r.code == http.StatusOK {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	send(20)
	p.signal(syscall.SIGTERM)
	p.waitDraining(5 * time.Second)
	send(20) // in the window: answered, and their rows written after
	if holdPastExit {
		// The join gives up with the writes blocked: exit 1, and the
		// error names the abandoned writes.
		p.waitExit(30 * time.Second)
		if !strings.Contains(p.output(), "abandoned") {
			t.Errorf("no log line says the writes were abandoned:\n%s", p.output())
		}
		_ = tx.Rollback(ctx)
	} else {
		// Once the listener refuses, every request has been answered and
		// the rows are all still to be written: the join must wait.
		waitRefused(t, p, 30*time.Second)
		_ = tx.Rollback(ctx) // the blocked INSERTs go on
		if code, _ := p.waitExit(30 * time.Second); code != 0 {
			t.Errorf("exit code %d, want 0:\n%s", code, p.output())
		}
	}
	var rows int
	if err := conn().QueryRow(ctx, "SELECT count(DISTINCT request_id) FROM "+auditTable).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	return auditRun{answered: answered, rows: rows}
}

// 31. The write behind every answer. 40 requests answered 200 — 20 before
// SIGTERM, 20 in the lame-duck window — while the test blocks every INSERT
// into the audit table, so each row is still to be written when the
// server has closed: the background join waits for them and the process
// exits 0 with 40 rows. The control: the same with LAMEDUCK_JOIN_BUDGET
// spent before the lock is released — the process exits with the writes
// still blocked, and rows go missing, which shows the count can see a
// lost write.
func TestE2EAuditRowsWrittenForEveryAnswer(t *testing.T) {
	t.Parallel()
	t.Run("joined", func(t *testing.T) {
		dsn, conn := auditSchema(t)
		got := runAudit(t, dsn, conn, env("LAMEDUCK_SHUTDOWN_DELAY", "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "20s"), false)
		t.Logf("answered %d, audit rows %d", got.answered, got.rows)
		if got.answered != 40 || got.rows != got.answered {
			t.Errorf("answered %d of 40 requests and wrote %d audit rows; want 40 and 40", got.answered, got.rows)
		}
	})
	t.Run("join budget spent, the control", func(t *testing.T) {
		dsn, conn := auditSchema(t)
		got := runAudit(t, dsn, conn, env("LAMEDUCK_SHUTDOWN_DELAY", "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "20s",
			"LAMEDUCK_JOIN_BUDGET", "1s"), true)
		t.Logf("answered %d, audit rows %d", got.answered, got.rows)
		if got.rows >= got.answered {
			t.Errorf("answered %d requests and found %d audit rows with the join cut short; want fewer rows: the test cannot see a lost write", got.answered, got.rows)
		}
	})
}

// waitRefused waits until p's listener refuses a connection.
func waitRefused(t *testing.T, p *proc, timeout time.Duration) {
	t.Helper()
	addr := strings.TrimPrefix(p.base, "http://")
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil && isRefused(err) {
			return
		}
		if c != nil {
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections %s after the signal", addr, timeout)
		}
		time.Sleep(pollEvery)
	}
}

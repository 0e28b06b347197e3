package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
	"go.uber.org/goleak"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fiberexample")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "example")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// listening finds the address in the process's "lameduck: listening" line
// (slog's default handler: "... INFO lameduck: listening addr=host:port ...").
var listening = regexp.MustCompile(`lameduck: listening addr=(\S+)`)

// eventually polls cond every 10ms for up to 20s (a hang guard).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}

// TestWebhooksSurviveSIGTERM runs the example binary against the real
// PostgreSQL and sends it a real SIGTERM while webhooks are in flight (held
// by a table lock the test takes) and while more arrive in the lame-duck
// window: /readyz turns 503 draining at once, every webhook is answered 200
// and stored once the lock is released during the teardown, and the
// process exits 0.
func TestWebhooksSurviveSIGTERM(t *testing.T) {
	dsn := testsupport.Postgres.Addr()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Every statement below runs under a hang guard.
	ctx := testsupport.Context(t, 2*time.Minute)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		testsupport.Postgres.Missing(t, err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS webhook_events (id bigserial PRIMARY KEY, body text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	// The process binds a port of its choosing and logs it: a free port
	// handed to it could be taken by another process before it binds.
	var out testsupport.LogBuffer
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), "ADDR=127.0.0.1:0", "DATABASE_URL="+dsn)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			_ = cmd.Process.Kill()
			t.Logf("output:\n%s", out.String())
		}
	}()
	var base string
	eventually(t, "the process logs the address it listens on", func() bool {
		m := listening.FindStringSubmatch(out.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	})
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		resp, err := c.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, "/readyz 200 with the db check", func() bool {
		code, body := get("/readyz")
		return code == 200 && strings.Contains(body, `"db":"ok"`)
	})

	// Hold every insert: the webhooks stay in flight until the test lets go.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "LOCK TABLE webhook_events IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var locker int
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&locker); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("run-%d", time.Now().UnixNano())
	results := make(chan string, 8)
	post := func(n int) {
		resp, err := c.Post(base+"/webhooks/payments", "application/json",
			strings.NewReader(fmt.Sprintf(`{"run":%q,"n":%d}`, marker, n)))
		if err != nil {
			results <- fmt.Sprintf("webhook %d: %v", n, err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		results <- fmt.Sprintf("webhook %d: %d %s", n, resp.StatusCode, b)
	}
	waiting := func(n int) func() bool {
		return func() bool {
			var k int
			// Inserts held by this test's lock, not another run's.
			_ = db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE 'INSERT INTO webhook_events%'`, locker).Scan(&k)
			return k >= n
		}
	}
	go post(0)
	eventually(t, "the first webhook waits on the lock", waiting(1))

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/readyz 503 draining", func() bool {
		code, body := get("/readyz")
		return code == 503 && strings.Contains(body, `"status":"draining"`) && !strings.Contains(body, `"checks"`)
	})
	// Webhooks keep arriving, on new connections, in the 3s window.
	for n := 1; n <= 3; n++ {
		go post(n)
	}
	eventually(t, "the window's webhooks wait on the lock", waiting(4))
	eventually(t, "the teardown begins", func() bool { return strings.Contains(out.String(), "lameduck: teardown") })
	if err := tx.Rollback(); err != nil { // let the inserts through
		t.Fatal(err)
	}
	for range 4 {
		if r := testsupport.Recv(t, results, "a webhook's answer"); !strings.Contains(r, `200 {"stored":true}`) {
			t.Errorf("%s; want 200 stored", r)
		}
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v; want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not exit")
	}
	var stored int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM webhook_events WHERE body LIKE '%' || $1 || '%'", marker).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 4 {
		t.Fatalf("%d of 4 webhooks stored", stored)
	}
	if !strings.Contains(out.String(), "≤ terminationGracePeriodSeconds 35s") {
		t.Errorf("the budget line does not check 3s + 25s against the 35s grace period:\n%s", out.String())
	}
}

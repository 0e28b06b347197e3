package ldfiber_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	ldfiber "github.com/lameduck/lameduck/contrib/fiber"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
)

// livePool returns a pool on the shared PostgreSQL with n connections open,
// or skips (fails under CI) when it does not answer.
func livePool(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	srv := testsupport.Postgres
	pool, err := pgxpool.New(context.Background(), srv.Addr())
	if err != nil {
		t.Fatalf("%s=%s: %v", srv.EnvVar, srv.Addr(), err)
	}
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conns := make([]*pgxpool.Conn, 0, n)
	for range n { // dialled now, so no query waits for a connect
		c, err := pool.Acquire(ctx)
		if err != nil {
			srv.Missing(t, err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return pool
}

// Every context a Fiber v2 handler can reach — c.Context() (the
// *fasthttp.RequestCtx) and c.UserContext() — passed to a 1s PostgreSQL
// query (pg_sleep, which pgx cancels on the server when its context ends)
// started 100ms before SIGTERM (the test signals its own process), with no
// lame-duck window: the teardown begins at the signal, and each query
// still runs to its end, its handler answering 200 with the query's result. Before the teardown let the
// requests end ahead of fasthttp's shutdown, c.Context() was cancelled at
// once and the handler answered 500 "context canceled".
func TestEveryContextLivesThroughTheTeardown(t *testing.T) {
	contexts := []string{"Context", "UserContext"}
	pool := livePool(t, len(contexts))
	started := make(chan string, len(contexts))
	// A Lifecycle of its own that listens to the process's signals, on the
	// real clock: the test sends SIGTERM to itself, as the kubelet would.
	logs := &testsupport.LogBuffer{}
	lc, err := lameduck.New(lameduck.Config{ShutdownTeardown: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(ldfiber.Middleware(lc))
	app.Get("/query", func(c *fiber.Ctx) error {
		name := c.Query("ctx")
		var ctx context.Context
		switch name {
		case "Context":
			ctx = c.Context()
		case "UserContext":
			ctx = c.UserContext()
		default:
			return c.Status(400).SendString("ctx=" + name)
		}
		started <- name
		var got string
		if err := pool.QueryRow(ctx, "SELECT $1::text FROM pg_sleep(1)", name).Scan(&got); err != nil {
			return c.Status(500).SendString(err.Error())
		}
		return c.SendString(got)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ldfiber.AddServer(lc, app, "", ln); err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	wait := lameducktest.Start(t, lc)
	answers := map[string]<-chan testsupport.Fetched{}
	for _, name := range contexts {
		answers[name] = testsupport.GoFetch(client(t), "GET", base+"/query?ctx="+name)
	}
	for range contexts {
		testsupport.Recv(t, started, "a query's start")
	}
	time.Sleep(100 * time.Millisecond) // the schedule under test: the signal 100ms into the 1s queries
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, name := range contexts {
		a := testsupport.Recv(t, answers[name], "the answer of the query on c."+name+"()").OK(t)
		if a.Code != 200 || a.Body != name {
			t.Errorf("the query on c.%s(): %d %q; want 200 %q", name, a.Code, a.Body, name)
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

package ldfiberv3_test

import (
	"context"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	ldfiberv3 "github.com/lameduck/lameduck/contrib/fiberv3"
	"github.com/lameduck/lameduck/contrib/internal/fasthttptest"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// Every context a Fiber v3 handler can reach — c itself (fiber.Ctx is a
// context.Context), c.Context() and c.RequestCtx() (the
// *fasthttp.RequestCtx) — passed to a 1s PostgreSQL query (pg_sleep, which
// pgx cancels on the server when its context ends) started 100ms before
// SIGTERM (the test signals its own process), with no lame-duck window:
// the teardown begins at the signal, and each query still runs to its end,
// its handler answering 200 with the query's result. Before the teardown let the requests end ahead of
// fasthttp's shutdown, c.RequestCtx() was cancelled at once and the
// handler answered 500 "context canceled".
func TestEveryContextLivesThroughTheTeardown(t *testing.T) {
	contexts := []string{"Ctx", "Context", "RequestCtx"}
	pool := fasthttptest.LivePool(t, len(contexts))
	started := make(chan string, len(contexts))
	// A Lifecycle of its own that listens to the process's signals, on the
	// real clock: the test sends SIGTERM to itself, as the kubelet would.
	lc := testsupport.SignalledLifecycle(t, 30*time.Second)
	app := fiber.New()
	app.Use(ldfiberv3.Middleware(lc))
	app.Get("/query", func(c fiber.Ctx) error {
		name := c.Query("ctx")
		var ctx context.Context
		switch name {
		case "Ctx":
			ctx = c
		case "Context":
			ctx = c.Context()
		case "RequestCtx":
			ctx = c.RequestCtx()
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
	ln, base := testsupport.Listen(t)
	if err := ldfiberv3.AddServer(lc, app, "", ln); err != nil {
		t.Fatal(err)
	}
	testsupport.SignalDuringQueries(t, lc, base, contexts, started)
}

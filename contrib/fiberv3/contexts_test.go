package ldfiberv3_test

import (
	"context"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/lameduck/lameduck/contrib/internal/fasthttptest"
)

// Every context a Fiber v3 handler can reach — c itself (fiber.Ctx is a
// context.Context), c.Context() and c.RequestCtx() (the
// *fasthttp.RequestCtx) — carries a 1s PostgreSQL query started 100ms
// before SIGTERM through the teardown to a 200 with its result
// (fasthttptest.EveryContextLivesThroughTheTeardown). Before the teardown
// let the requests end ahead of fasthttp's shutdown, c.RequestCtx() was
// cancelled at once and the handler answered 500 "context canceled".
func TestEveryContextLivesThroughTheTeardown(t *testing.T) {
	fasthttptest.EveryContextLivesThroughTheTeardown(t, server, []string{"Ctx", "Context", "RequestCtx"},
		func(app *fiber.App, path string, answer fasthttptest.Contexts) {
			app.Get(path, func(c fiber.Ctx) error {
				answer(c.RequestCtx(), map[string]context.Context{"Ctx": c, "Context": c.Context(), "RequestCtx": c.RequestCtx()})
				return nil
			})
		})
}

package ldfiber_test

import (
	"context"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/lameduck/lameduck/contrib/internal/fasthttptest"
)

// Every context a Fiber v2 handler can reach — c.Context() (the
// *fasthttp.RequestCtx) and c.UserContext() — carries a 1s PostgreSQL
// query started 100ms before SIGTERM through the teardown to a 200 with
// its result (fasthttptest.EveryContextLivesThroughTheTeardown). Before
// the teardown let the requests end ahead of fasthttp's shutdown,
// c.Context() was cancelled at once and the handler answered 500 "context
// canceled".
func TestEveryContextLivesThroughTheTeardown(t *testing.T) {
	fasthttptest.EveryContextLivesThroughTheTeardown(t, server, []string{"Context", "UserContext"},
		func(app *fiber.App, path string, answer fasthttptest.Contexts) {
			app.Get(path, func(c *fiber.Ctx) error {
				answer(c.Context(), map[string]context.Context{"Context": c.Context(), "UserContext": c.UserContext()})
				return nil
			})
		})
}

package ldfiber_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/gofiber/fiber/v2"
	"github.com/lameduck/lameduck"
	ldfiber "github.com/lameduck/lameduck/contrib/fiber"
)

// A Fiber app on a Lifecycle: New installs the middleware first and
// registers the app; Run serves it, and drains it on SIGTERM. (Here the
// shutdown is asked for before Run, so the example stops at once.)
func ExampleNew() {
	lc, err := lameduck.New(lameduck.Config{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		LookupEnv: func(string) (string, bool) { return "", false },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	app, err := ldfiber.New(lc, "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })
	lc.BeginShutdown("example")
	fmt.Println("Run:", lc.Run(context.Background()))
	// Output: Run: <nil>
}

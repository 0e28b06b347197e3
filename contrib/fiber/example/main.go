// Command example is a Fiber API rebuilt on lameduck: readiness that pings
// PostgreSQL through database/sql, a payment webhook that is never dropped
// across a rolling restart, a 3s lame-duck window, a 25s teardown, for a pod
// with terminationGracePeriodSeconds: 35.
//
// On SIGTERM /readyz answers 503 draining at once, without pinging the
// database; the app keeps serving for 3s while endpoint removal propagates;
// then Fiber's ShutdownWithContext runs under the 25s teardown, every
// webhook in flight is answered, and the pool is closed last. A webhook
// still running at 25s is cut and named in the log, and the exit code is 1.
//
//	DATABASE_URL=postgres://127.0.0.1:5432/test ADDR=:8080 go run .
package main

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"time"

	"github.com/gofiber/fiber/v2"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/checks"
	ldfiber "github.com/lameduck/lameduck/contrib/fiber"
	"github.com/lameduck/lameduck/health"
)

func main() {
	if err := run(os.Getenv("ADDR"), os.Getenv("DATABASE_URL")); err != nil {
		os.Exit(1) // lameduck has logged why
	}
}

func run(addr, dsn string) error {
	lc, err := lameduck.New(lameduck.Config{
		ShutdownDelay:    3 * time.Second,  // the lame-duck window
		ShutdownTeardown: 25 * time.Second, // ShutdownWithContext's budget
		TerminationGrace: 35 * time.Second, // checked at start: 3s + 25s fits
	})
	if err != nil {
		slog.Error(err.Error())
		return err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		slog.Error(err.Error())
		return err
	}
	if err := lc.AddCloser("postgres", func(context.Context) error { return db.Close() }); err != nil {
		return err
	}
	if err := lc.AddCheck(checks.SQLPing(health.Check{Name: "db", Critical: true}, db)); err != nil {
		return err
	}
	app, err := ldfiber.New(lc, addr)
	if err != nil {
		return err
	}
	app.Post("/webhooks/payments", func(c *fiber.Ctx) error {
		// c.Context() lives until the request ends (or the teardown
		// budget cuts it): the teardown waits for this insert.
		_, err := db.ExecContext(c.Context(),
			"INSERT INTO webhook_events (body) VALUES ($1)", string(c.Body()))
		if err != nil {
			return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"error": "not stored; retry"})
		}
		return c.JSON(fiber.Map{"stored": true})
	})
	app.Get("/openapi.json", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"openapi": "3.1.0"}) })
	return lc.Run(context.Background())
}

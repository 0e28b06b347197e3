package main

import (
	"bufio"
	"bytes"
	"sync"
	"time"

	fiberws "github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	ldfiber "github.com/lameduck/lameduck/contrib/fiber"
)

// addFiber serves the routes on a Fiber app (lameduck demo --server fiber),
// so the same end-to-end tests and rollouts run against both servers.
// The probes are mounted by the middleware ldfiber.New installs first.
func (d *demo) addFiber(addr string) error {
	app, err := ldfiber.New(d.lc, addr, fiber.Config{ReadTimeout: time.Minute, IdleTimeout: time.Minute})
	if err != nil {
		return err
	}
	send := func(c *fiber.Ctx, code int, body any) error { return c.Status(code).JSON(body) }
	app.Get("/", func(c *fiber.Ctx) error {
		code, body := d.root()
		return send(c, code, body)
	})
	app.Post("/echo", func(c *fiber.Ctx) error {
		code, body := d.echo(bytes.NewReader(c.Body()))
		return send(c, code, body)
	})
	app.Get("/slow", func(c *fiber.Ctx) error {
		// c.Context() lives until the request ends or the teardown budget
		// cuts it, as r.Context() does on net/http.
		code, body, ok := d.slow(c.Context(), query(c))
		if !ok {
			return nil // cut at the budget: the Lifecycle closes the connection
		}
		return send(c, code, body)
	})
	app.Post("/echo", func(c *fiber.Ctx) error {
		code, body := d.echo(bytes.NewReader(c.Body()))
		return send(c, code, body)
	})
	app.Post("/write", func(c *fiber.Ctx) error {
		code, body := d.write(query(c))
		return send(c, code, body)
	})
	app.Post("/loop", func(c *fiber.Ctx) error {
		code, body := d.loop(query(c))
		return send(c, code, body)
	})
	if d.metrics != nil {
		app.Get("/metrics", adaptor.HTTPHandler(d.metrics))
	}
	app.Get("/ws", fiberws.New(d.fiberEcho))
	app.Get("/events", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "text/event-stream")
		c.Set(fiber.HeaderCacheControl, "no-store")
		ldfiber.Stream(d.lc, c, func(w *bufio.Writer) {
			eventLoop(d.lc, nil, func(ev string) error {
				if _, err := w.WriteString(ev); err != nil {
					return err
				}
				return w.Flush() // fails once the client has left
			})
		})
		return nil
	})
	return nil
}

// query returns the request's query as net/url would.
func query(c *fiber.Ctx) map[string][]string {
	q := map[string][]string{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) { q[string(k)] = append(q[string(k)], string(v)) })
	return q
}

// fiberEcho is serveEcho on Fiber: a WebSocket echo whose every message
// bumps the idle drain's clock, closed with 1001 going away when the
// lame-duck window ends.
func (d *demo) fiberEcho(c *fiberws.Conn) {
	// The closer writes on the connection: it must be done before the
	// handler returns and fasthttp recycles the connection.
	var wg sync.WaitGroup
	done := make(chan struct{})
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		select {
		case <-d.lc.Events().WindowEnded.Done():
			// The client answers with its close frame and ReadMessage
			// returns; lameduck closes the connection at the teardown
			// budget if it never does.
			msg := fiberws.FormatCloseMessage(fiberws.CloseGoingAway, "server shutting down")
			if err := c.WriteControl(fiberws.CloseMessage, msg, time.Now().Add(time.Second)); err != nil {
				d.log.Info("demo: websocket close frame not sent", "error", err.Error())
			}
		case <-done:
		}
	})
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		d.lc.KeepAlive()
		if err := c.WriteMessage(typ, msg); err != nil {
			return
		}
	}
}

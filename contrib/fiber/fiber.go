// Package ldfiber runs a Fiber (github.com/gofiber/fiber/v2) app under
// a lameduck Lifecycle, with the same probes and the same drain as a
// net/http server registered with Lifecycle.AddServer:
//
//   - [Middleware], installed before any other handler, answers /healthz,
//     /readyz (with /readyz/<check>, ?verbose, ?exclude and
//     application/health+json), /startupz and /prestop with the very
//     handler net/http servers use, so bodies and headers are the same byte
//     for byte; and it tracks every other request as in flight, without
//     allocating, so the teardown waits for it, the idle drain counts it,
//     and the budget names it if it has to cut it. From the shutdown signal
//     on, responses carry Connection: close and WebSocket upgrades are
//     refused 503 with Retry-After, so clients reconnect elsewhere; in
//     reject mode (LAMEDUCK_SEND_RETRY_AFTER) every new request is.
//   - [AddServer] registers the app with the Lifecycle: Run binds its listener,
//     serves it with App.Listener, and stops it with
//     App.ShutdownWithContext under the teardown budget, then closes what is
//     left; what is cut is named in the log with method, path and age.
//   - [New] does both for a new app.
//
// The fasthttp half (the tracking, the refusals, the probes) is
// contrib/fasthttp's Middleware. Handlers that stream (server-sent events,
// WebSockets) watch Lifecycle.Events().WindowEnded.Done() to finish when the lame-duck window
// ends; a streamed body goes through [Stream] to be counted in flight.
//
// A handler may pass any of its contexts to a database call: fasthttp's
// shutdown, which closes RequestCtx.Done(), begins only once the requests
// in flight have ended or the teardown budget is spent. fasthttp never
// tells a running handler that its client left. See the operations guide,
// docs/probes-and-shutdown.md, for the sequence.
//
// Import it as
//
//	import ldfiber "github.com/lameduck/lameduck/contrib/fiber"
package ldfiber

import (
	"bufio"
	"net"

	"github.com/gofiber/fiber/v2"
	"github.com/lameduck/lameduck"
	ldfasthttp "github.com/lameduck/lameduck/contrib/fasthttp"
)

// New returns a Fiber app configured by config (its zero value when
// omitted), with [Middleware] installed as its first handler, and registered
// with lc by [AddServer] to be served on addr (such as ":8080") when lc.Run
// runs. Fiber's startup banner is turned off: the Lifecycle logs the
// listening line. Register routes on the app as usual; do not call its
// Listen, Listener or Shutdown methods.
//
// It returns AddServer's error (an error once Run has
// started, or an error naming an empty addr).
func New(lc *lameduck.Lifecycle, addr string, config ...fiber.Config) (*fiber.App, error) {
	var cfg fiber.Config
	if len(config) > 0 {
		cfg = config[0]
	}
	cfg.DisableStartupMessage = true
	app := fiber.New(cfg)
	app.Use(Middleware(lc))
	if err := AddServer(lc, app, addr, nil); err != nil {
		return nil, err
	}
	return app, nil
}

// AddServer registers app with lc, as Lifecycle.AddServer does an
// *http.Server, with the arguments in the order of every contrib AddServer
// (the Lifecycle, the server, its address, a listener): Run binds addr (or
// uses ln when not nil), serves app on it with App.Listener, and in the
// teardown, beside the HTTP servers and under the same budget, stops it in
// this order (ldfasthttp.ServerFuncs): its listener closes; the requests in
// flight run to their end, every context a handler can reach (c.Context()
// (the *fasthttp.RequestCtx) and c.UserContext()) still live; then
// App.ShutdownWithContext runs Fiber's shutdown hooks and closes the idle
// keep-alive connections, counted in the log. At the budget it closes every
// connection still open, WebSockets included, and names the requests it cut.
// It sets app.Server().ConnState (chaining the hook it had). Install
// [Middleware] first on app, or its requests are neither tracked nor told to
// close, and the probes are not mounted.
//
// It returns the error of Lifecycle.AddServerFuncs: an error naming an
// empty addr with a nil ln, or an error once Run has
// started.
func AddServer(lc *lameduck.Lifecycle, app *fiber.App, addr string, ln net.Listener) error {
	// The requests first, then Fiber's shutdown (its hooks, then fasthttp's,
	// which closes RequestCtx.Done()); at the budget, the requests'
	// contexts end and the Lifecycle closes the connections accepted on the
	// listener it handed to Serve.
	funcs := ldfasthttp.ServerFuncs(lc, "fiber", app.Server(), app.Listener, app.ShutdownWithContext)
	funcs.Addr = addr
	return lc.AddServerFuncs(funcs, ln)
}

// Middleware returns the request-tracking middleware for lc. Install it
// first, before authentication, rate limits and routes (app.Use before any
// other handler; [New] does): a request that reaches a route before it is
// not tracked, and a probe must not need credentials. Per request it:
//
//   - answers the probe paths with lc.ProbeHandler() (through fasthttp's
//     net/http adaptor: the same renderer as net/http, so the same bodies
//     and headers), unless Config.ProbeAddr gives the probes a listener of
//     their own;
//   - refuses, with 503, Retry-After: 1, Connection: close and a text
//     body, a WebSocket upgrade that arrives after the shutdown signal, and
//     every new request in reject mode;
//   - marks the response Connection: close from the shutdown signal on
//     (fasthttp's RequestCtx.SetConnectionClose), so a keep-alive client
//     moves to a fresh connection;
//   - tracks the request from its arrival until the next handlers have
//     returned (a panic included), or, for a connection they hijacked (a
//     WebSocket upgraded by github.com/gofiber/contrib/websocket), until
//     that connection closes. Tracking costs no allocation
//     (BenchmarkMiddleware).
//
// It is safe for concurrent use.
func Middleware(lc *lameduck.Lifecycle) fiber.Handler {
	m := ldfasthttp.New(lc)
	return func(c *fiber.Ctx) error {
		fc := c.Context()
		tr, answered := m.Begin(fc)
		if answered {
			return nil
		}
		defer m.End(fc, tr)
		return c.Next()
	}
}

// Stream streams the response body from fn (RequestCtx.SetBodyStreamWriter)
// and counts the stream as a request in flight until fn has returned, so the
// teardown waits for it and names it if the budget cuts it: server-sent
// events, say. fn runs after the handler returned; it should end the stream
// when lc.Events().WindowEnded.Done() is closed and return when a Flush fails (the client left).
// It is ldfasthttp.Stream for a Fiber context, under the same name.
func Stream(lc *lameduck.Lifecycle, c *fiber.Ctx, fn func(w *bufio.Writer)) {
	ldfasthttp.Stream(lc, c.Context(), fn)
}

package ldfiberv3_test

import (
	"bufio"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/lameduck/lameduck"
	ldfiberv3 "github.com/lameduck/lameduck/contrib/fiberv3"
	"github.com/lameduck/lameduck/contrib/internal/fasthttptest"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/valyala/fasthttp"
)

func TestMain(m *testing.M) { fasthttptest.VerifyTestMain(m) }

// server is a Fiber v3 app as the shared tests of fasthttptest build it:
// ldfiberv3's middleware first, each route handled on c.RequestCtx().
var server = fasthttptest.Server[*fiber.App]{
	Name: "Fiber",
	New: func(lc *lameduck.Lifecycle) *fiber.App {
		app := fiber.New()
		if lc != nil {
			app.Use(ldfiberv3.Middleware(lc))
		}
		return app
	},
	Handle: func(app *fiber.App, method, path string, h fasthttp.RequestHandler) {
		app.Add([]string{method}, path, func(c fiber.Ctx) error { h(c.RequestCtx()); return nil })
	},
	AddServer:     ldfiberv3.AddServer,
	NewRegistered: func(lc *lameduck.Lifecycle, addr string) (*fiber.App, error) { return ldfiberv3.New(lc, addr) },
	Handler:       (*fiber.App).Handler,
}

// The tests every fasthttp-based server passes; each function's comment in
// fasthttptest says what it holds.

func TestProbesAreByteIdenticalToNetHTTP(t *testing.T) {
	fasthttptest.ProbesAreByteIdenticalToNetHTTP(t, server)
}

func TestDrainOnFiber(t *testing.T) {
	fasthttptest.Drain(t, server)
}

func TestStuckRequestIsCutAndNamed(t *testing.T) {
	fasthttptest.StuckRequestIsCutAndNamed(t, server)
}

func TestRejectModeOnFiber(t *testing.T) {
	fasthttptest.RejectMode(t, server)
}

func TestUpgradesOnFiber(t *testing.T) {
	fasthttptest.Upgrades(t, server)
}

func TestHijackedRequestKeepsItsName(t *testing.T) {
	fasthttptest.HijackedRequestKeepsItsName(t, server)
}

func TestIdleAppStopsAtOnce(t *testing.T) {
	fasthttptest.IdleAppStopsAtOnce(t, server)
}

func TestNewRegistersTheApp(t *testing.T) {
	fasthttptest.NewRegistersTheApp(t, server)
}

func TestMiddlewareAllocatesNothing(t *testing.T) {
	fasthttptest.MiddlewareAllocatesNothing(t, server)
}

func BenchmarkMiddleware(b *testing.B) {
	fasthttptest.BenchMiddleware(b, server)
}

// Stream counts the streamed body in flight, under the request's method
// and path, until its writer returns: the teardown waits for it, and the
// stream ends with its final event when the window ends.
func TestStreamIsTracked(t *testing.T) {
	var r *fasthttptest.Rig[*fiber.App]
	r = server.Rig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/events", func(c fiber.Ctx) error {
			ldfiberv3.Stream(r.LC, c, func(w *bufio.Writer) {
				w.WriteString("data: hello\n\n")
				if w.Flush() != nil {
					return
				}
				<-r.LC.Events().WindowEnded.Done()
				w.WriteString("event: bye\n\n")
			})
			return nil
		})
	})
	r.Start(t)
	testsupport.StreamIsTracked(t, r.HTTPRig)
}

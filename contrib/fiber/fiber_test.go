package ldfiber_test

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	fiberws "github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"
	"github.com/lameduck/lameduck"
	ldfiber "github.com/lameduck/lameduck/contrib/fiber"
	"github.com/lameduck/lameduck/contrib/internal/fasthttptest"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/valyala/fasthttp"
)

func TestMain(m *testing.M) { fasthttptest.VerifyTestMain(m) }

// server is a Fiber v2 app as the shared tests of fasthttptest build it:
// ldfiber's middleware first, each route handled on c.Context().
var server = fasthttptest.Server[*fiber.App]{
	Name: "Fiber",
	New: func(lc *lameduck.Lifecycle) *fiber.App {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		if lc != nil {
			app.Use(ldfiber.Middleware(lc))
		}
		return app
	},
	Handle: func(app *fiber.App, method, path string, h fasthttp.RequestHandler) {
		app.Add(method, path, func(c *fiber.Ctx) error { h(c.Context()); return nil })
	},
	AddServer:     ldfiber.AddServer,
	NewRegistered: func(lc *lameduck.Lifecycle, addr string) (*fiber.App, error) { return ldfiber.New(lc, addr) },
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

// TestWebSocketsOnFiber: a WebSocket opened before the signal is tracked
// (hijacked) and closed by its handler with 1001 when the window ends; one
// asked for after the signal is refused 503 with Retry-After.
func TestWebSocketsOnFiber(t *testing.T) {
	r, ws, ctx := wsRig(t, nil)
	if got := r.LC.InFlight(); len(got) != 1 || !got[0].Hijacked || got[0].Path != "/ws" {
		t.Fatalf("InFlight = %+v; want the WebSocket, hijacked", got)
	}
	r.LC.BeginShutdown("test")
	if _, _, err := websocket.Dial(ctx, strings.Replace(r.Base, "http", "ws", 1)+"/ws", nil); err == nil {
		t.Fatal("a WebSocket upgrade after the signal was accepted")
	}
	a := testsupport.Do(t, testsupport.Client(t), "GET", r.Base+"/ws", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket",
		"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
	if a.Code != 503 || a.Header.Get("Retry-After") != "1" || !strings.Contains(a.Body, "upgrade on another instance") {
		t.Fatalf("upgrade after the signal: %d %v %q", a.Code, a.Header, a.Body)
	}
	testsupport.Timers(t, r.Clk, 1)
	r.Clk.Advance(time.Second)
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("the WebSocket ended with %v; want a 1001 close frame", err)
	}
	if err := r.Wait(); err != nil {
		t.Fatalf("Run = %v; the WebSocket closed cleanly", err)
	}
}

// wsRig returns a started rig (ShutdownDelay 1s, ShutdownTeardown 5s)
// whose GET /ws is a WebSocket its handler closes with 1001 when the window
// ends, and more's routes (nil for none); it dials the WebSocket and waits
// until it is in flight, hijacked. It returns the rig, the WebSocket, and a
// context, a hang guard, for every dial and read that follows.
func wsRig(t *testing.T, more func(app *fiber.App)) (*fasthttptest.Rig[*fiber.App], *websocket.Conn, context.Context) {
	t.Helper()
	var r *fasthttptest.Rig[*fiber.App]
	r = server.Rig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/ws", fiberws.New(func(c *fiberws.Conn) {
			<-r.LC.Events().WindowEnded.Done()
			// A write deadline a loaded machine cannot outlast (a hang
			// guard): a 1s one could pass before the frame is written.
			_ = c.WriteControl(fiberws.CloseMessage,
				fiberws.FormatCloseMessage(fiberws.CloseGoingAway, "draining"), time.Now().Add(testsupport.Guard))
		}))
		if more != nil {
			more(app)
		}
	})
	r.Start(t)
	ctx := testsupport.Context(t, testsupport.Guard)
	ws, _, err := websocket.Dial(ctx, strings.Replace(r.Base, "http", "ws", 1)+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	testsupport.AwaitHijacked(t, r.LC)
	return r, ws, ctx
}

// TestStreamIsTracked: a body streamed after the handler returned is a
// request in flight until the stream ends; the teardown waits for it.
func TestStreamIsTracked(t *testing.T) {
	var r *fasthttptest.Rig[*fiber.App]
	r = server.Rig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second}, false, func(app *fiber.App) {
		app.Get("/events", func(c *fiber.Ctx) error {
			ldfiber.Stream(r.LC, c, func(w *bufio.Writer) {
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

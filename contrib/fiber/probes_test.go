package ldfiber_test

import (
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
)

// Probes through the Fiber middleware are not application requests, as on
// net/http (docs/probes-and-shutdown.md): asked all through an idle-drain
// window, they do not push its end past its minimum; and in reject mode,
// where new requests get 503, /healthz still answers 200 and /readyz 503
// draining.
func TestProbesAreNotApplicationRequestsOnFiber(t *testing.T) {
	t.Run("idle drain", func(t *testing.T) {
		r := newRig(t, lameduck.Config{DrainMode: lameduck.DrainIdle, ShutdownDelay: time.Second,
			IdleWindow: 2 * time.Second, DrainTimeout: 20 * time.Second}, false, nil)
		r.start()
		// Off the clock's first instant, which the idle drain could not
		// tell from no traffic at all.
		r.clk.Advance(100 * time.Millisecond)
		r.lc.BeginShutdown("test")
		c := client(t)
		for _, p := range []string{"/healthz", "/readyz", "/startupz"} {
			testsupport.Do(t, c, "GET", r.base+p, nil)
		}
		if got := r.lc.InFlight(); len(got) != 0 {
			t.Fatalf("InFlight() after probes = %v", got)
		}
		testsupport.Timers(t, r.clk, 1) // the window's
		r.clk.Advance(time.Second)
		testsupport.Await(t, r.lc.Events().WindowEnded)
		if a, _ := r.lc.Events().ShutdownInitiated.At(); !a.Add(time.Second).Equal(r.clk.Now()) {
			t.Fatal("probes held the idle drain past its 1s minimum")
		}
		if err := r.wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reject mode", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		r := newRig(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true}, false, func(app *fiber.App) {
			app.Get("/slow", func(c *fiber.Ctx) error { close(entered); <-release; return nil })
			app.Get("/new", func(c *fiber.Ctx) error { return nil })
		})
		r.start()
		slow := testsupport.GoFetch(client(t), "GET", r.base+"/slow")
		testsupport.Recv(t, entered, "the /slow handler")
		lameducktest.EndWindow(t, r.lc, r.clk)
		var a testsupport.Reply
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && a.Code != 503; {
			a = testsupport.Do(t, client(t), "GET", r.base+"/new", nil)
		}
		if a.Code != 503 {
			t.Fatalf("no refusal in reject mode: %d %q", a.Code, a.Body)
		}
		testsupport.Do(t, client(t), "GET", r.base+"/healthz", nil).Status(t, 200, "ok")
		testsupport.Do(t, client(t), "GET", r.base+"/readyz", nil).Status(t, 503, "draining")
		close(release)
		if a := testsupport.Recv(t, slow, "the in-flight request's answer").OK(t); a.Code != 200 {
			t.Fatalf("the in-flight request got %d", a.Code)
		}
		if err := r.wait(); err != nil {
			t.Fatal(err)
		}
	})
}

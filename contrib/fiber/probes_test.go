package ldfiber_test

import (
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
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
		testsupport.ProbesKeepIdleDrainShort(t, r.HTTPRig)
	})
	t.Run("reject mode", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		r := newRig(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true}, false, func(app *fiber.App) {
			app.Get("/slow", func(c *fiber.Ctx) error { close(entered); <-release; return nil })
			app.Get("/new", func(c *fiber.Ctx) error { return nil })
		})
		r.start()
		testsupport.RejectMode(t, r.HTTPRig, entered, release)
	})
}

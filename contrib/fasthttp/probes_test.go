package ldfasthttp_test

import (
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/valyala/fasthttp"
)

// Probes through the fasthttp middleware are not application requests, as
// on net/http (docs/probes-and-shutdown.md): asked all through an
// idle-drain window, they do not push its end past its minimum; and in
// reject mode, where new requests get 503, /healthz still answers 200 and
// /readyz 503 draining.
func TestProbesAreNotApplicationRequestsOnFastHTTP(t *testing.T) {
	t.Run("idle drain", func(t *testing.T) {
		r := newFastRig(t, lameduck.Config{DrainMode: lameduck.DrainIdle, ShutdownDelay: time.Second,
			IdleWindow: 2 * time.Second, DrainTimeout: 20 * time.Second},
			func(*lameduck.Lifecycle) fasthttp.RequestHandler { return func(fc *fasthttp.RequestCtx) {} })
		testsupport.ProbesKeepIdleDrainShort(t, r)
	})
	t.Run("reject mode", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		r := newFastRig(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true},
			func(*lameduck.Lifecycle) fasthttp.RequestHandler {
				return func(fc *fasthttp.RequestCtx) {
					if string(fc.Path()) == "/slow" {
						close(entered)
						<-release
					}
				}
			})
		testsupport.RejectMode(t, r, entered, release)
	})
}

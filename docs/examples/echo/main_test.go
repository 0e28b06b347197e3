package main

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/docs/examples/internal/exampletest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The Echo example, driven through boot, probes, its middleware, a request
// in flight across the signal, the window and the drain.
func TestEchoExample(t *testing.T) {
	exampletest.Drive(t, "echo", func(lc *lameduck.Lifecycle, slow http.Handler) http.Handler {
		e := newApp(lc)
		e.GET("/slow", echo.WrapHandler(slow))
		return e
	})
}

package main

import (
	"net/http"
	"testing"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/docs/examples/internal/exampletest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The chi example, driven through boot, probes, its middleware, a request in
// flight across the signal, the window and the drain.
func TestChiExample(t *testing.T) {
	exampletest.Drive(t, "chi", func(lc *lameduck.Lifecycle, slow http.Handler) http.Handler {
		r := newRouter(lc)
		r.Get("/slow", slow.ServeHTTP)
		return r
	})
}

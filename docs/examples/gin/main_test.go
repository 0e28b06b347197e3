package main

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/docs/examples/internal/exampletest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no route table printed by gin's debug mode
	goleak.VerifyTestMain(m)
}

// The Gin example, driven through boot, probes, its middleware, a request in
// flight across the signal, the window and the drain.
func TestGinExample(t *testing.T) {
	exampletest.Drive(t, "gin", func(lc *lameduck.Lifecycle, slow http.Handler) http.Handler {
		r := newEngine(lc)
		r.GET("/slow", gin.WrapH(slow))
		return r
	})
}

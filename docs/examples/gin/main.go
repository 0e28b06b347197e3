// Command gin serves a Gin engine behind lameduck: the probes on the same
// port, every request tracked in flight, and a SIGTERM drain that drops
// nothing. See docs/frameworks.md.
package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/lameduck/lameduck"
)

func main() {
	// LAMEDUCK_* variables fill what the Config leaves unset.
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err) // names the variable, the value and the fix
	}
	// *gin.Engine is an http.Handler: make it the server's Handler and let
	// lameduck own the server. AddServer puts lameduck in front of it:
	// /healthz, /readyz and /startupz are answered before any Gin
	// middleware runs, and every other request is tracked, so the drain
	// waits for it.
	srv := &http.Server{Addr: ":8080", Handler: newEngine(lc), ReadHeaderTimeout: 10 * time.Second}
	if err := lc.AddServer(srv, nil); err != nil {
		log.Fatal(err)
	}
	// Run binds the listener, serves, and on SIGTERM drains; it returns when
	// the drain is over. Do not call engine.Run: it owns no shutdown.
	if err := lc.Run(context.Background()); err != nil {
		os.Exit(1) // Run has logged why
	}
}

// newEngine is the application: Gin's middleware and routes as usual
// (gin.New, not gin.Default, to pick them). No route for the probes:
// lameduck answers them first, so this key check never sees the kubelet.
func newEngine(lc *lameduck.Lifecycle) *gin.Engine {
	r := gin.New()
	r.Use(gin.Recovery())
	r.Use(func(c *gin.Context) {
		if c.GetHeader("X-API-Key") == "" {
			c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "missing X-API-Key"})
			return
		}
		c.Next()
	})
	r.GET("/hello", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"hello": "gin", "phase": lc.Phase().String()})
	})
	return r
}

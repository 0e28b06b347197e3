// Command echo serves an Echo app behind lameduck: the probes on the same
// port, every request tracked in flight, and a SIGTERM drain that drops
// nothing. See docs/frameworks.md.
package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/lameduck/lameduck"
)

func main() {
	// LAMEDUCK_* variables fill what the Config leaves unset.
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err) // names the variable, the value and the fix
	}
	// *echo.Echo is an http.Handler: make it the server's Handler and let
	// lameduck own the server. AddServer puts lameduck in front of it:
	// /healthz, /readyz and /startupz are answered before any Echo
	// middleware runs, and every other request is tracked, so the drain
	// waits for it.
	srv := &http.Server{Addr: ":8080", Handler: newApp(lc), ReadHeaderTimeout: 10 * time.Second}
	if err := lc.AddServer(srv, nil); err != nil {
		log.Fatal(err)
	}
	// Run binds the listener, serves, and on SIGTERM drains; it returns when
	// the drain is over. Do not call e.Start, e.StartServer or e.Shutdown.
	if err := lc.Run(context.Background()); err != nil {
		os.Exit(1) // Run has logged why
	}
}

// newApp is the application: Echo's middleware and routes as usual. No
// route for the probes: lameduck answers them first, so this key check
// never sees the kubelet.
func newApp(lc *lameduck.Lifecycle) *echo.Echo {
	e := echo.New()
	e.Use(middleware.Recover())
	e.Use(middleware.KeyAuthWithConfig(middleware.KeyAuthConfig{
		KeyLookup: "header:X-API-Key",
		Validator: func(key string, c echo.Context) (bool, error) { return key != "", nil },
	}))
	e.GET("/hello", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"hello": "echo", "phase": lc.Phase().String()})
	})
	return e
}

// Command chi serves a chi router behind lameduck: the probes on the same
// port, every request tracked in flight, and a SIGTERM drain that drops
// nothing. See docs/frameworks.md.
package main

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/lameduck/lameduck"
)

func main() {
	// LAMEDUCK_* variables fill what the Config leaves unset.
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err) // names the variable, the value and the fix
	}
	// The router is the server's whole Handler. AddServer puts lameduck in
	// front of it: /healthz, /readyz and /startupz are answered before any
	// chi middleware runs, and every other request is tracked, so the drain
	// waits for it.
	srv := &http.Server{Addr: ":8080", Handler: newRouter(lc), ReadHeaderTimeout: 10 * time.Second}
	if err := lc.AddServer(srv, nil); err != nil {
		log.Fatal(err)
	}
	// Run binds the listener, serves, and on SIGTERM drains; it returns when
	// the drain is over. Do not call srv.ListenAndServe or srv.Shutdown.
	if err := lc.Run(context.Background()); err != nil {
		os.Exit(1) // Run has logged why
	}
}

// newRouter is the application: chi's middleware and routes as usual. No
// route for the probes (chi's middleware.Heartbeat included): lameduck
// answers them first, so this API-key check never sees the kubelet.
func newRouter(lc *lameduck.Lifecycle) *chi.Mux {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(requireAPIKey)
	r.Get("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"hello": "chi", "phase": lc.Phase().String()})
	})
	return r
}

func requireAPIKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "" {
			http.Error(w, "missing X-API-Key", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

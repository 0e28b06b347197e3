// Command refserver is the reference server that `lameduck rollout` must
// catch failing: a plain net/http server that shuts down the way many do.
//
//	refserver --addr 127.0.0.1:8080                    # naive: Shutdown at SIGTERM, no lame-duck window
//	refserver --addr 127.0.0.1:8080 --prestop-sleep 5s # as with preStop: sleep 5, then the same
//
// Naive: at SIGTERM it calls http.Server.Shutdown at once. The listener
// closes while the load balancer still routes to it: connections are
// refused, and idle keep-alive connections are closed under requests being
// sent on them.
//
// With --prestop-sleep it first waits, with /readyz still 200, as a pod does
// while its `preStop: exec: sleep 5` hook runs (the kubelet sends SIGTERM
// only after the hook). That hides the race only while endpoint removal is
// faster than the sleep; `lameduck rollout --removal-delay 6s-8s` shows the
// failures again.
//
// Routes: GET / and GET /readyz, /healthz (200), POST /echo (the body's
// size). It is a test fixture of cmd/lameduck (docs/rollout.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	sleep := flag.Duration("prestop-sleep", 0, "wait this long after SIGTERM, still ready, before Shutdown")
	flag.Parse()

	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { ok(w, map[string]string{"service": "refserver"}) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { ok(w, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { ok(w, map[string]string{"status": "ok"}) })
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		ok(w, map[string]int64{"read": n})
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	done := make(chan error, 1)
	go func() {
		<-sigs
		time.Sleep(*sleep) // the preStop sleep: nothing changes while it runs
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "refserver:", err)
		os.Exit(1)
	}
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "refserver: shutdown:", err)
		os.Exit(1)
	}
}

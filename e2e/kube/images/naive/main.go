// Command naive is the server that lameduck's cluster tests compare the
// demo with: what a service author writes without lameduck. It serves the
// routes the load uses (GET / and POST /echo) over HTTP/1.1 and h2c, as the
// demo does, the demo's streams as a user writes them without lameduck
// (GET /ws, a WebSocket echo, and GET /events, a server-sent event every
// 100ms, both until the client or the process goes), and /healthz, /readyz
// and /startupz. NAIVE_MODE picks the server:
//
//   - "" (Go's default server): it handles no signal, so SIGTERM ends it at
//     once, and /readyz answers 200 until the process is gone. With a
//     `preStop: sleep` in its pod it is the Kubernetes-native recipe.
//   - "handwritten" (the hand-written lame duck found in blog posts): at
//     SIGTERM /readyz turns 503, the server keeps serving for
//     NAIVE_LAME_DUCK (default 5s) so the endpoint can be removed, then
//     http.Server.Shutdown with a 25s bound.
//
// With NAIVE_AUDIT_POSTGRES (a PostgreSQL URL) each 2xx answer to GET / and
// POST /echo is followed by an audit row, as lameduck's demo writes with
// --audit-postgres (same table, lameduck_audit, made by the test), but the
// way a handler does without lameduck: in a goroutine that nothing joins.
//
// POST /slow reads the body, waits a second and echoes it: a request that
// is in flight whenever a pod stops, so a server that exits at SIGTERM
// fails some of them however the endpoint removal races the signal, and a
// POST, which Go's transport never sends again, fails at the client.
//
// It logs JSON lines ("naive: draining" at SIGTERM, "naive: stopped" at the
// end) so the suite times what the server itself saw.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	mode := os.Getenv("NAIVE_MODE")
	if mode != "" && mode != "handwritten" {
		log.Error("naive: NAIVE_MODE must be empty (Go's default server) or handwritten", "value", mode)
		os.Exit(2)
	}
	lameDuck := 5 * time.Second
	if v := os.Getenv("NAIVE_LAME_DUCK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			log.Error("naive: NAIVE_LAME_DUCK must be a non-negative Go duration such as 5s", "value", v)
			os.Exit(2)
		}
		lameDuck = d
	}

	audit := func(*http.Request) {}
	if dsn := os.Getenv("NAIVE_AUDIT_POSTGRES"); dsn != "" {
		pool, err := pgxpool.New(context.Background(), dsn) // connects lazily
		if err != nil {
			log.Error("naive: NAIVE_AUDIT_POSTGRES must be a PostgreSQL URL such as postgres://user@host:5432/db", "error", err)
			os.Exit(2)
		}
		pod, _ := os.Hostname()
		audit = func(r *http.Request) {
			id, method, path := r.Header.Get("X-Request-Id"), r.Method, r.URL.Path
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := pool.Exec(ctx, `INSERT INTO lameduck_audit (request_id, pod, method, path) VALUES ($1, $2, $3, $4)`,
					id, pod, method, path); err != nil {
					log.Error("naive: audit row not written", "request_id", id, "error", err)
				}
			}()
		}
	}

	var draining atomic.Bool
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"ok"}`) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /startupz", ok)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"draining"}`)
			return
		}
		ok(w, r)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from naive\n")
		audit(r)
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(w, r.Body); err == nil {
			audit(r)
		}
	})
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		select {
		case <-time.After(time.Second):
			w.Write(body)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return // Accept has answered
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil || c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/event-stream")
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 1; ; n++ {
			if _, err := fmt.Fprintf(w, "id: %d\ndata: tick %d\n\n", n, n); err != nil || rc.Flush() != nil {
				return
			}
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
	})
	srv := &http.Server{Addr: ":" + cmp.Or(os.Getenv("PORT"), "8080"), Handler: mux, Protocols: new(http.Protocols),
		ReadHeaderTimeout: 10 * time.Second}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	log.Info("naive: listening", "addr", srv.Addr, "mode", cmp.Or(mode, "default"))

	if mode == "" {
		err := srv.ListenAndServe()
		log.Error("naive: stopped", "error", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	select {
	case err := <-served:
		log.Error("naive: stopped", "error", err)
		os.Exit(1)
	case s := <-sig:
		start := time.Now()
		draining.Store(true)
		log.Info("naive: draining", "signal", s.String(), "lame_duck", lameDuck.String())
		time.Sleep(lameDuck)
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		if errors.Is(<-served, http.ErrServerClosed) && err == nil {
			log.Info("naive: stopped", "since_signal", time.Since(start).String())
			return
		}
		log.Error("naive: stopped", "error", err, "since_signal", time.Since(start).String())
		os.Exit(1)
	}
}

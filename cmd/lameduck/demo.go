package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/checks"
	"github.com/lameduck/lameduck/cmd/lameduck/internal/ctxtime"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/lameduck/lameduck/health"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// maxSlow bounds GET /slow?d=, so a typo cannot hold a request for a day.
const maxSlow = 10 * time.Minute

type demoOptions struct {
	addr         string
	server       string
	startupDelay time.Duration
	startupDial  string
	logFormat    string
	checks       checkFlags
	contrib      contribFlags
	grpcAddr     string
	metricsAddr  string
	auditDSN     string
}

func newDemoCommand() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a demo service that answers the probes and drains on SIGTERM",
		Long: `Run a demo HTTP service built on lameduck, on net/http or, with
--server fiber, on a Fiber (gofiber/fiber v2) app driven by the same
Lifecycle (every route below), or, with --server connect, on net/http with
the Connect RPC service lameduck.demo.Demo (Slow, Ticks) and the gRPC health
service beside the routes, over HTTP/1.1 and h2c (docs/connect.md).

Routes: GET / (a small JSON answer), POST /echo (answers with the size of the
body it read), GET /metrics (the Lifecycle's Prometheus metrics; with
--metrics-addr on a listener of its own instead, readable until the process
exits), GET /ws (a WebSocket echo that closes
with 1001 going away when the window ends), GET /events (server-sent events,
one every 100ms, ending with a final "bye" event when the window ends), GET /slow?d=DURATION (answers after d, at
most 10m), POST /write?name=NAME&d=DURATION (a background write of d, joined at
shutdown; 202, or 503 once refused), POST /loop?name=NAME (a background loop
ticking every 100ms until the signal; 503 after it), and the probes GET /healthz, /livez, /readyz, /startupz, plus GET /prestop
when LAMEDUCK_PRESTOP=true (with LAMEDUCK_PRESTOP_TOKEN, sent in the
X-Lameduck-Token header, or on the probe port of LAMEDUCK_PROBE_ADDR). Send SIGTERM (or press Ctrl-C) to watch the drain:
/readyz turns 503 at once, the lame-duck window passes, in-flight requests
finish, and the process exits 0.

With --audit-postgres, each 2xx answer to GET / and POST /echo starts a
background write of a row (request_id from X-Request-Id, pod, method, path,
at) into the table ` + auditTable + ` of that PostgreSQL, created at start; the
writes are joined at shutdown, so every answered request has its row.

Every LAMEDUCK_* environment variable applies (LAMEDUCK_SHUTDOWN_DELAY,
LAMEDUCK_SHUTDOWN_TEARDOWN, LAMEDUCK_ENV, LAMEDUCK_TERMINATION_GRACE, ...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", ":8080", "listen address")
	f.StringVar(&o.server, "server", "http", `the server that serves the routes: "http" (net/http), "fiber" (gofiber/fiber v2) or "connect" (net/http with the Connect RPC service lameduck.demo.Demo and grpc.health.v1 on the same port)`)
	f.DurationVar(&o.startupDelay, "startup-delay", 0, "simulated boot work before the service is ready, such as 2s")
	f.StringVar(&o.startupDial, "startup-dial", "", "boot work that needs HOST:PORT up (a database, say): a TCP dial, tried again with backoff until it answers or LAMEDUCK_STARTUP_TIMEOUT is spent")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringArrayVar(&o.checks.simulate, "simulate-check", nil,
		"a simulated readiness check NAME=MODE[,critical], MODE one of ok, fail, slow=DURATION, wedge, panic, flap=DURATION (repeatable)")
	f.StringArrayVar(&o.checks.tcp, "check-tcp", nil, "a TCP dial readiness check NAME=HOST:PORT[,critical] (repeatable)")
	f.StringArrayVar(&o.checks.http, "check-http", nil, "an HTTP GET readiness check NAME=URL[,critical] (repeatable)")
	f.StringArrayVar(&o.checks.dns, "check-dns", nil, "a DNS lookup readiness check NAME=HOST[,critical] (repeatable)")
	f.StringArrayVar(&o.contrib.postgres, "check-postgres", nil, "a PostgreSQL readiness check through a pgx pool NAME=DSN[,critical] (repeatable)")
	f.StringArrayVar(&o.contrib.mysql, "check-mysql", nil, "a MySQL/MariaDB readiness check NAME=DSN[,critical], DSN as go-sql-driver/mysql reads it (repeatable)")
	f.StringArrayVar(&o.contrib.redis, "check-redis", nil, "a Redis PING readiness check NAME=HOST:PORT[,critical] (repeatable)")
	f.StringArrayVar(&o.contrib.nats, "check-nats", nil, "a NATS readiness check NAME=URL[,critical] (repeatable)")
	f.StringArrayVar(&o.contrib.amqp, "check-amqp", nil, "a RabbitMQ readiness check NAME=URL[,critical] (repeatable)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve GET /metrics on this address (such as :9091) instead of --addr: a listener of its own, open from before the service starts until the process exits, so a scrape reads every step of the shutdown, the join and the closers included, after --addr has closed")
	f.StringVar(&o.auditDSN, "audit-postgres", "", "record an audit row in the table "+auditTable+" of this PostgreSQL (a URL such as postgres://user@host:5432/db) for every 2xx answer to GET / and POST /echo, through a background write joined at shutdown; the row is named by the request's X-Request-Id header (not with --server fiber)")
	f.StringVar(&o.grpcAddr, "grpc-addr", "", "also serve gRPC on this address (such as :9000): the grpc.health.v1 service and lameduck.demo.Demo (Slow, Ticks), drained with the HTTP server")
	return cmd
}

func newLogger(format string) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, nil)), nil
	}
	return nil, fmt.Errorf(`--log-format=%q: unknown format; use "text" or "json"`, format)
}

// validate checks every flag and returns all the problems at once, as a
// usageError (exit 2), or the logger and the checks the flags ask for.
func (o demoOptions) validate(start time.Time, pings pingCounts) (*slog.Logger, []health.Check, error) {
	var errs []error
	switch host, port, err := net.SplitHostPort(o.addr); {
	case o.addr == "":
		errs = append(errs, errors.New(`--addr="": empty; give a listen address such as :8080 or 127.0.0.1:8080`))
	case err != nil:
		errs = append(errs, fmt.Errorf("--addr=%q: want HOST:PORT or :PORT, such as :8080 or 127.0.0.1:8080", o.addr))
	case port == "":
		errs = append(errs, fmt.Errorf("--addr=%q: no port; give one, such as %s:8080 (0 picks a free port)", o.addr, host))
	}
	if o.metricsAddr != "" {
		if _, port, err := net.SplitHostPort(o.metricsAddr); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("--metrics-addr=%q: want HOST:PORT or :PORT, such as :9091 or 127.0.0.1:9091 (0 picks a free port)", o.metricsAddr))
		}
	}
	if o.startupDelay < 0 {
		errs = append(errs, fmt.Errorf("--startup-delay=%s: must not be negative; use 0s for none", o.startupDelay))
	}
	if o.server != "http" && o.server != "fiber" && o.server != "connect" {
		errs = append(errs, fmt.Errorf(`--server=%q: unknown server; use "http" (net/http), "fiber" (gofiber/fiber v2) or "connect" (Connect RPC)`, o.server))
	}
	if o.auditDSN != "" && o.server == "fiber" {
		errs = append(errs, errors.New(`--audit-postgres with --server=fiber: the audit rows are written by the net/http routes only; use --server=http or --server=connect`))
	}
	log, err := newLogger(o.logFormat)
	errs = append(errs, err)
	checkList, err := o.checks.build(start, pings)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, nil, usageError{err}
	}
	return log, checkList, nil
}

func runDemo(ctx context.Context, o demoOptions) error {
	pings := pingCounts{}
	log, checkList, err := o.validate(time.Now(), pings)
	if err != nil {
		return err
	}
	cfg := lameduck.Config{Logger: log}
	if len(pings) > 0 {
		cfg.Fields = pings.fields
	}
	reg := prometheus.NewRegistry()
	if err := ldprometheus.Instrument(&cfg, reg); err != nil {
		return exitError{err} // not reached: a fresh registry holds none of lameduck's series
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		logErrors(log, o.logFormat, "lameduck: invalid configuration; nothing was started", err)
		return exitError{err}
	}
	var errs []error
	for _, c := range checkList {
		errs = append(errs, lc.AddCheck(c))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err} // a bad or duplicate check name in the flags
	}
	if err := o.contrib.add(lc); err != nil {
		return usageError{err} // a bad target or a duplicate name in the flags
	}
	scrape := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	d := &demo{lc: lc, log: log, metrics: scrape}
	if o.metricsAddr != "" {
		stop, err := serveMetrics(log, o.metricsAddr, scrape)
		if err != nil {
			return err
		}
		defer stop() // after Run has returned: the last scrape sees "stopped"
		d.metrics = nil
	}
	if o.auditDSN != "" {
		if d.audit, err = newAudit(lc, o.auditDSN); err != nil {
			return err
		}
	}
	switch o.server {
	case "http":
		err = d.addHTTP(o.addr)
	case "fiber":
		err = d.addFiber(o.addr)
	case "connect":
		err = d.addConnect(o.addr)
	}
	if err != nil {
		return err
	}
	if o.grpcAddr != "" { // after the HTTP server, which is logged listening first
		if err := addGRPC(lc, o.grpcAddr); err != nil {
			return err
		}
	}
	if o.startupDelay > 0 {
		d := o.startupDelay
		if err := lc.AddStartupTask("simulated boot work", func(ctx context.Context) error {
			return ctxtime.Sleep(ctx, d)
		}); err != nil {
			return err
		}
	}
	if o.startupDial != "" {
		if err := lc.AddStartupTask("dial "+o.startupDial, checks.TCPDial(health.Check{}, o.startupDial).Func, lameduck.Retry{}); err != nil {
			return err
		}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := lc.Run(ctx); err != nil {
		return exitError{err} // Run has logged it
	}
	return nil
}

// serveMetrics serves GET /metrics on addr, outside the Lifecycle: its
// teardown never closes this listener, so a scrape reads the phase, the
// steps and the counters through the whole shutdown, after the
// application's listener has closed (docs/prometheus.md, "Where to serve
// /metrics"). stop shuts it down, for at most a second; call it once Run
// has returned. The error names the flag when addr cannot be bound.
func serveMetrics(log *slog.Logger, addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr=%q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed once stop has run
	}()
	log.Info("demo: metrics listening", "addr", ln.Addr().String(), "path", "/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// demo holds the demo's routes, written once and served by net/http
// (addHTTP) or Fiber (addFiber). Each route returns its status code and
// JSON body.
type demo struct {
	lc      *lameduck.Lifecycle
	log     *slog.Logger
	metrics http.Handler // GET /metrics: the Lifecycle's Prometheus metrics
	audit   *audit       // --audit-postgres: a row behind each 2xx answer; nil without
}

// root answers GET /.
func (d *demo) root() (int, any) {
	host, _ := os.Hostname()
	return http.StatusOK, map[string]any{"service": "lameduck demo", "host": host, "phase": d.lc.Phase().String()}
}

// echo answers POST /echo with the size of the body it read: a request with
// a body, which a client cannot safely send twice (lameduck rollout's POSTs).
func (d *demo) echo(body io.Reader) (int, any) {
	n, err := io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	if err != nil {
		return http.StatusBadRequest, map[string]any{"error": err.Error()}
	}
	return http.StatusOK, map[string]any{"read": n}
}

// slow answers GET /slow?d=: it sleeps d, or until ctx ends (the client
// left, or the connection was cut), and reports ok=false then.
func (d *demo) slow(ctx context.Context, q map[string][]string) (code int, body any, ok bool) {
	dur, msg := parseSlow(q)
	if msg != "" {
		return http.StatusBadRequest, map[string]any{"error": msg}, true
	}
	if ctxtime.Sleep(ctx, dur) != nil {
		return 0, nil, false
	}
	return http.StatusOK, map[string]any{"slept": dur.String()}, true
}

// write answers POST /write?name=&d=: a best-effort background write of d,
// joined at shutdown.
func (d *demo) write(q map[string][]string) (int, any) {
	name := first(q, "name")
	if name == "" {
		return http.StatusBadRequest, map[string]any{"error": "missing name: pass /write?name=audit-row&d=200ms"}
	}
	dur, msg := parseSlow(q)
	if msg != "" {
		return http.StatusBadRequest, map[string]any{"error": msg}
	}
	err := d.lc.GoWrite(name, 0, func(ctx context.Context) error {
		if err := ctxtime.Sleep(ctx, dur); err != nil {
			return err
		}
		d.log.Info("demo: write done", "task", name, "took", dur.String())
		return nil
	})
	if err != nil {
		return http.StatusServiceUnavailable, map[string]any{"error": err.Error()}
	}
	return http.StatusAccepted, map[string]any{"write": name, "d": dur.String()}
}

// loop answers POST /loop?name=: a background loop ticking every 100ms
// until the signal.
func (d *demo) loop(q map[string][]string) (int, any) {
	name := first(q, "name")
	if name == "" {
		return http.StatusBadRequest, map[string]any{"error": "missing name: pass /loop?name=sweep"}
	}
	err := d.lc.GoLoop(name, func(ctx context.Context) error {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		ticks := 0
		for {
			select {
			case <-tick.C:
				ticks++
			case <-ctx.Done():
				d.log.Info("demo: loop stopped", "task", name, "ticks", ticks)
				return nil
			}
		}
	})
	if err != nil {
		return http.StatusServiceUnavailable, map[string]any{"error": err.Error(),
			"reason": "the pod is shutting down; record the work as deferred"}
	}
	return http.StatusAccepted, map[string]any{"loop": name}
}

// addHTTP serves the routes on a net/http server.
func (d *demo) addHTTP(addr string) error {
	return d.lc.AddServer(demoHTTPServer(addr, d.httpMux()), nil)
}

// httpMux is the routes on a net/http mux.
func (d *demo) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		code, body := d.root()
		code, body = d.audit.record(r, code, body)
		writeJSON(w, code, body)
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		code, body := d.echo(r.Body)
		code, body = d.audit.record(r, code, body)
		writeJSON(w, code, body)
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		if code, body, ok := d.slow(r.Context(), r.URL.Query()); ok {
			writeJSON(w, code, body)
		}
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		code, body := d.write(r.URL.Query())
		writeJSON(w, code, body)
	})
	mux.HandleFunc("POST /loop", func(w http.ResponseWriter, r *http.Request) {
		code, body := d.loop(r.URL.Query())
		writeJSON(w, code, body)
	})
	// Long-lived connections, which the drain closes cleanly.
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) { serveEcho(d.lc, d.log, w, r) })
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) { serveEvents(d.lc, w, r) })
	if d.metrics != nil {
		mux.Handle("GET /metrics", d.metrics)
	}
	return mux
}

// demoHTTPServer is the demo's net/http server for handler on addr.
func demoHTTPServer(addr string, handler http.Handler) *http.Server {
	// Timeouts against slow clients (docs/security.md, "Slow clients on
	// the servers you hand in"): headers within 10s, idle keep-alive
	// connections closed after 2m. No ReadTimeout or WriteTimeout: they
	// would cut /ws, /events and /slow, which are long on purpose.
	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // h2c, so HTTP/2 clients can try the GOAWAY hand-off
	return srv
}

func first(q map[string][]string, k string) string {
	if vs := q[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// parseSlow reads d from /slow's query; msg says what is wrong with it.
func parseSlow(q map[string][]string) (d time.Duration, msg string) {
	v := first(q, "d")
	if v == "" {
		return 0, "missing d: pass a Go duration, such as /slow?d=2s"
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Sprintf("d=%q is not a Go duration with a unit; write, for example, d=2s or d=250ms", v)
	case d < 0:
		return 0, fmt.Sprintf("d=%q is negative; use 0s or more", v)
	case d > maxSlow:
		return 0, fmt.Sprintf("d=%q is over the %s limit", v, maxSlow)
	}
	return d, ""
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

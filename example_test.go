package lameduck_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
)

// A service registers its server and startup work, then Run serves until the
// shutdown sequence has finished. Here the sequence is started by a call, as
// a test or an embedding program would; in production SIGTERM starts it.
func ExampleLifecycle_Run() {
	lc, err := lameduck.New(lameduck.Config{
		ShutdownDelay:    lameduck.NoDelay, // no lame-duck window, for the example
		ShutdownTeardown: 5 * time.Second,
		LookupEnv:        func(string) (string, bool) { return "", false },
		Logger:           slog.New(slog.DiscardHandler),
		IgnoreSignals:    true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	lc.AddServer(&http.Server{Handler: http.NotFoundHandler()}, ln)
	lc.AddStartupTask("warm-up", func(ctx context.Context) error { return nil })

	go func() {
		<-lc.Events().StartupDone.Done()
		lc.BeginShutdown("example") // /readyz is 503 when this returns
	}()
	err = lc.Run(context.Background())
	fmt.Println("Run:", err)
	fmt.Println("phase:", lc.Phase())
	rec := httptest.NewRecorder()
	lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	fmt.Println("/readyz:", rec.Code)
	start, _ := lc.Events().ShutdownInitiated.At()
	end, _ := lc.Events().Stopped.At()
	fmt.Println("within the bound:", end.Sub(start) <= 5*time.Second)
	// Output:
	// Run: <nil>
	// phase: stopped
	// /readyz: 503
	// within the bound: true
}

// Bad settings are refused before anything listens, with the variable, the
// value and the fix.
func ExampleNew_badSetting() {
	_, err := lameduck.New(lameduck.Config{
		LookupEnv: func(k string) (string, bool) {
			if k == "LAMEDUCK_SHUTDOWN_DELAY" {
				return "5", true
			}
			return "", false
		},
	})
	fmt.Println(err)
	// Output:
	// lameduck: LAMEDUCK_SHUTDOWN_DELAY="5": a duration needs a unit (write 5s or 5ms); set it to a Go duration with a unit, such as "5s" ("0s" for no window), or unset it: invalid configuration
}

// Critical checks gate readiness; the others only make it "degraded", still
// 200. A sidecar only this pod uses is critical (traffic should move to the
// other pods); a cache every replica shares is not, so its outage never
// empties the Service (docs/probes-and-shutdown.md, "When a check should be
// critical").
//
// On the application's own listener (and through ProbeHandler) a body names
// the failing check with its outcome word alone; the error text, which
// names an internal host and port, stays in the log. CheckDetails "show"
// (or LAMEDUCK_CHECK_DETAILS=show, or probes on their own port with
// ProbeAddr) puts it in the body, redacted of credentials.
func ExampleLifecycle_AddCheck() {
	lc, err := lameduck.New(lameduck.Config{
		Version: "v1.2.0", Commit: "a984b10",
		CheckDetails:  lameduck.CheckDetailsAuto,
		CheckTimeout:  10 * time.Second, // the default is 1s; 10s keeps this output steady on a loaded machine
		LookupEnv:     func(string) (string, bool) { return "", false },
		Logger:        slog.New(slog.DiscardHandler),
		IgnoreSignals: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	lc.AddCheck(health.Check{Name: "sidecar", Critical: true, Func: func(ctx context.Context) error { return nil }})
	lc.AddCheck(health.Check{Name: "cache", Func: func(ctx context.Context) error {
		return errors.New("dial tcp 10.0.0.9:6379: connection refused")
	}})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	lc.AddServer(&http.Server{Handler: http.NotFoundHandler()}, ln)
	go func() {
		<-lc.Events().StartupDone.Done()
		for _, path := range []string{"/readyz", "/readyz?verbose"} {
			rec := httptest.NewRecorder()
			lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			fmt.Print(rec.Code, " ", rec.Body.String())
		}
		lc.BeginShutdown("example")
	}()
	lc.Run(context.Background())
	// Output:
	// 200 {"status":"degraded","version":"v1.2.0","commit":"a984b10","phase":"serving","checks":{"cache":"error","sidecar":"ok"}}
	// 200 [-]cache failed: error
	// [+]sidecar ok
	// readyz check passed
}

// A best-effort write started by a request (an audit row) is joined by the
// shutdown instead of cut, and a loop's context ends at the signal.
func ExampleLifecycle_GoWrite() {
	lc, err := lameduck.New(lameduck.Config{
		LookupEnv:     func(string) (string, bool) { return "", false },
		Logger:        slog.New(slog.DiscardHandler),
		IgnoreSignals: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	released := make(chan struct{})
	lc.GoLoop("lease", func(ctx context.Context) error {
		<-ctx.Done() // cancelled at the signal; the join waits for the return
		close(released)
		return nil
	})
	lc.BeginShutdown("example")
	<-released
	fmt.Println("lease released at the signal")
	err = lc.GoLoop("late-sweep", func(context.Context) error { return nil })
	fmt.Println("a new loop after the signal is refused:", errors.Is(err, lameduck.ErrShuttingDown))
	err = lc.GoWrite("audit-row", 5*time.Second, func(ctx context.Context) error { return nil })
	fmt.Println("a write after the signal is accepted:", err == nil)
	fmt.Println("Run:", lc.Run(context.Background())) // joins the write
	err = lc.GoWrite("too-late", time.Second, func(ctx context.Context) error { return nil })
	fmt.Println("a write after the join is refused:", errors.Is(err, lameduck.ErrShuttingDown))
	// Output:
	// lease released at the signal
	// a new loop after the signal is refused: true
	// a write after the signal is accepted: true
	// Run: <nil>
	// a write after the join is refused: true
}

// Resolve is a dry run of the configuration, for a --check-config flag or a
// deploy step: it reads an environment as New would (here a pod's, from a
// map rather than the process's own), binds nothing, and says each refused
// setting with its fix, and each value with the rule that chose it.
func ExampleResolve() {
	env := map[string]string{
		"KUBERNETES_SERVICE_HOST":    "10.96.0.1", // set by the kubelet in every container
		"LAMEDUCK_TERMINATION_GRACE": "20s",
		"LAMEDUCK_IDLE_WINDOW":       "5",
	}
	res, errs := lameduck.Resolve(lameduck.Config{
		LookupEnv: func(key string) (string, bool) { v, ok := env[key]; return v, ok },
	})
	for _, err := range errs {
		var ce *lameduck.ConfigError
		if errors.As(err, &ce) {
			fmt.Printf("refused %s=%q: %s\n", ce.Setting, ce.Value, ce.Problem)
		}
	}
	c := res.Config
	fmt.Println("inside Kubernetes:", c.Env == lameduck.EnvKubernetes)
	fmt.Println("window:", c.ShutdownDelay, "by", res.Sources["SHUTDOWN_DELAY"])
	fmt.Println("teardown:", c.ShutdownTeardown, "by", res.Sources["SHUTDOWN_TEARDOWN"])
	// Output:
	// refused LAMEDUCK_IDLE_WINDOW="5": a duration needs a unit (write 5s or 5ms)
	// inside Kubernetes: true
	// window: 5s by default in Kubernetes
	// teardown: 13s by default: terminationGracePeriodSeconds 20s − preStop 0s − window 5s − margin 2s
}

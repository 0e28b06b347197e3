package ldfx_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldfx "github.com/lameduck/lameduck/contrib/fx"
	"github.com/lameduck/lameduck/internal/testsupport"
	"go.uber.org/fx"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is a dependency with fx hooks, as an application's database pool
// is: opened by OnStart, closed by OnStop, and refusing work once closed.
type store struct {
	opening chan struct{} // the test closes it to let OnStart finish
	open    atomic.Bool
	closed  atomic.Bool
	// what the Lifecycle had done when OnStop ran
	drainedAtClose atomic.Bool
}

func (s *store) use() error {
	if !s.open.Load() || s.closed.Load() {
		return errors.New("the store is closed")
	}
	return nil
}

func newStore(lc fx.Lifecycle, ld *lameduck.Lifecycle) *store {
	s := &store{opening: make(chan struct{})}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			select {
			case <-s.opening:
				s.open.Store(true)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		OnStop: func(context.Context) error {
			s.drainedAtClose.Store(ld.Events().HTTPDrained.Fired())
			s.closed.Store(true)
			return nil
		},
	})
	return s
}

// app is an fx application on a free port: GET /work?d= answers after d,
// using the store.
func newApp(t *testing.T, cfg lameduck.Config, extra ...fx.Option) (app *fx.App, lc *lameduck.Lifecycle, st *store, base string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base = "http://" + ln.Addr().String()
	opts := append([]fx.Option{
		ldfx.Option(cfg),
		fx.NopLogger,
		fx.Provide(newStore),
		fx.Populate(&st, &lc),
		fx.Invoke(func(lc *lameduck.Lifecycle, s *store) error {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /work", func(w http.ResponseWriter, r *http.Request) {
				d, _ := time.ParseDuration(r.URL.Query().Get("d"))
				time.Sleep(d)
				if err := s.use(); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				_, _ = io.WriteString(w, "done")
			})
			return lc.AddServer(&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln)
		}),
	}, extra...)
	app = fx.New(opts...)
	if err := app.Err(); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	return app, lc, st, base
}

func testConfig(t *testing.T, logs io.Writer, delay, teardown time.Duration) lameduck.Config {
	return lameduck.Config{ShutdownDelay: delay, ShutdownTeardown: teardown,
		LookupEnv: func(string) (string, bool) { return "", false },
		Logger:    slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	r, err := testsupport.Fetch(c, http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r.Code, r.Body
}

// An fx application that calls app.Run(), given the option: the probes
// answer while its OnStart hooks run (503 starting, liveness 200); on a
// real SIGTERM readiness turns 503, the requests in flight finish with the
// store still open, and only then do the OnStop hooks run; app.Run
// returns. fx's stop timeout is the sequence's bound plus 1s.
func TestAppRunDrainsBeforeOnStop(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	app, lc, st, base := newApp(t, testConfig(t, logs, 500*time.Millisecond, 10*time.Second))
	if got, want := app.StopTimeout(), 500*time.Millisecond+10*time.Second+time.Second; got != want {
		t.Errorf("fx's stop timeout: %s, want %s", got, want)
	}
	ran := make(chan struct{})
	go func() { defer close(ran); app.Run() }()
	c := &http.Client{Timeout: testsupport.Guard}
	defer c.CloseIdleConnections()

	// The OnStart hook is running: the probes answer all the same.
	var code int
	for deadline := time.Now().Add(testsupport.Guard); ; time.Sleep(5 * time.Millisecond) {
		if r, err := testsupport.Fetch(c, http.MethodGet, base+"/startupz", nil); err == nil {
			code = r.Code
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/startupz never answered while the OnStart hook ran")
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Errorf("/startupz while an OnStart hook runs: %d, want 503", code)
	}
	if code, _ := get(t, c, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while an OnStart hook runs: %d, want 200", code)
	}
	close(st.opening)
	for deadline := time.Now().Add(testsupport.Guard); ; time.Sleep(5 * time.Millisecond) {
		if code, _ := get(t, c, base+"/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz never 200 after the OnStart hook returned")
		}
	}

	// Requests in flight at the signal.
	const n = 5
	var wg sync.WaitGroup
	answers := make(chan string, n)
	for range n {
		wg.Go(func() {
			code, body := get(t, c, base+"/work?d=1s")
			if code != http.StatusOK || body != "done" {
				answers <- body
			}
		})
	}
	waitInFlight(t, lc, n)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(testsupport.Guard); ; time.Sleep(5 * time.Millisecond) {
		if strings.Contains(logs.String(), "lameduck: draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no drain after SIGTERM")
		}
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		t.Errorf("a request in flight at SIGTERM: %q, want done", a)
	}
	testsupport.Recv(t, ran, "app.Run's return")
	if !st.closed.Load() || !st.drainedAtClose.Load() {
		t.Errorf("OnStop ran: %v, after the HTTP drain: %v; want both", st.closed.Load(), st.drainedAtClose.Load())
	}
	if !strings.Contains(logs.String(), "every in-flight request finished") {
		t.Errorf("the drain was not clean:\n%s", logs)
	}
}

// waitInFlight waits until lc counts n requests in flight.
func waitInFlight(t *testing.T, lc *lameduck.Lifecycle, n int) {
	t.Helper()
	for deadline := time.Now().Add(testsupport.Guard); len(lc.InFlight()) != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight, want %d", len(lc.InFlight()), n)
		}
	}
}

// A failing OnStart hook fails the boot as a startup task does: Start
// returns lameduck's error (ErrStartupFailed), the hooks that started have
// their OnStop run, the failed one does not, and nothing is left running.
func TestOnStartErrorFailsTheBoot(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	var stopped []string
	app, _, st, _ := newApp(t, testConfig(t, logs, time.Second, 5*time.Second),
		fx.Invoke(func(lc fx.Lifecycle) {
			lc.Append(fx.Hook{OnStart: func(context.Context) error { return nil },
				OnStop: func(context.Context) error { stopped = append(stopped, "first"); return nil }})
			lc.Append(fx.Hook{OnStart: func(context.Context) error { return errors.New("migration failed") },
				OnStop: func(context.Context) error { stopped = append(stopped, "failed"); return nil }})
		}))
	close(st.opening)
	err := app.Start(testsupport.Context(t, testsupport.Guard))
	if !errors.Is(err, lameduck.ErrStartupFailed) || !strings.Contains(err.Error(), "migration failed") {
		t.Fatalf("Start: %v, want lameduck.ErrStartupFailed naming the hook's error", err)
	}
	if strings.Join(stopped, ",") != "first" || !st.closed.Load() {
		t.Errorf("OnStop hooks run: %q (store closed: %v); want the ones that started, in reverse", stopped, st.closed.Load())
	}
}

// A bad setting is fx.New's error, naming the setting and the fix.
func TestBadSettingIsNewsError(t *testing.T) {
	app := fx.New(ldfx.Option(lameduck.Config{ShutdownTeardown: -time.Second,
		LookupEnv: func(string) (string, bool) { return "", false }}), fx.NopLogger)
	err := app.Err()
	if !errors.As(err, new(*lameduck.ConfigError)) || !strings.Contains(err.Error(), "ShutdownTeardown") {
		t.Fatalf("app.Err() = %v; want a *lameduck.ConfigError naming ShutdownTeardown", err)
	}
}

// fx.Shutdowner starts the sequence as SIGTERM does (the window included),
// the OnStop hooks run after the drain, and a stop timeout set after the
// option, shorter than the sequence, is named in the log.
func TestShutdownerRunsTheSequence(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	var sd fx.Shutdowner
	app, lc, st, _ := newApp(t, testConfig(t, logs, 200*time.Millisecond, 5*time.Second), fx.Populate(&sd))
	close(st.opening)
	if err := app.Start(testsupport.Context(t, testsupport.Guard)); err != nil {
		t.Fatal(err)
	}
	if err := sd.Shutdown(); err != nil {
		t.Fatal(err)
	}
	sig := testsupport.Recv(t, app.Wait(), "the shutdown signal")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		t.Fatalf("Stop after %v: %v", sig, err)
	}
	if !lc.Events().WindowEnded.Fired() || !st.closed.Load() || !st.drainedAtClose.Load() {
		t.Errorf("window passed: %v, OnStop ran: %v, after the drain: %v; want all", lc.Events().WindowEnded.Fired(), st.closed.Load(), st.drainedAtClose.Load())
	}
}

func TestShortStopTimeoutIsNamed(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	app, _, st, _ := newApp(t, testConfig(t, logs, lameduck.NoDelay, 5*time.Second), fx.StopTimeout(2*time.Second))
	close(st.opening)
	if err := app.Start(testsupport.Context(t, testsupport.Guard)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), app.StopTimeout())
	defer cancel()
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "fx's stop timeout is shorter than the shutdown sequence") {
		t.Errorf("no warning for a 2s fx stop timeout under a 5s sequence:\n%s", logs)
	}
}

package ldprometheus_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/prometheus/client_golang/prometheus"
)

// Each shutdown step's duration, as lameduck_shutdown_step_duration_seconds
// reports it, is the time the step took: a 5s window, a teardown hook that
// sleeps 2s beside a server whose Shutdown sleeps 4s, a background write
// that ends 1s after the HTTP drain, a closer that sleeps 500ms. In a
// synctest bubble, so the times are exact. The same scenario as the root
// package's TestEventsTellEachStepsTime, told by the metric instead of the
// events.
func TestStepDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			window  = 5 * time.Second
			hooks   = 2 * time.Second // the one hook's sleep
			drain   = 4 * time.Second // the server's Shutdown; the hooks run beside it
			join    = 1 * time.Second // the write ends this long after the drain
			closers = 500 * time.Millisecond
		)
		var logs bytes.Buffer
		cfg := lameduck.Config{
			ShutdownDelay:    window,
			ShutdownTeardown: 30 * time.Second,
			IgnoreSignals:    true,
			LookupEnv:        func(string) (string, bool) { return "", false },
			Logger:           slog.New(slog.NewTextHandler(&logs, nil)),
		}
		reg := prometheus.NewPedanticRegistry()
		if err := ldprometheus.Instrument(&cfg, reg); err != nil {
			t.Fatal(err)
		}
		lc, err := lameduck.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if t.Failed() {
				t.Logf("logs:\n%s", logs.String())
			}
		}()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(lc.AddTeardownHook("release", func(context.Context) error { time.Sleep(hooks); return nil }))
		must(lc.AddCloser("pool", func(context.Context) error { time.Sleep(closers); return nil }))
		must(lc.AddServerFuncs(testsupport.SlowServer(drain), testsupport.NewChanListener()))

		done := make(chan error, 1)
		go func() { done <- lc.Run(context.Background()) }()
		<-lc.Events().StartupDone.Done()
		// A write that outlives the HTTP drain by join: started now, it
		// ends window + drain + join from now.
		must(lc.GoWrite("audit", time.Minute, func(context.Context) error {
			time.Sleep(window + drain + join)
			return nil
		}))
		lc.BeginShutdown("test")
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}

		fams := gather(t, reg)
		for _, step := range []struct {
			label string
			want  time.Duration
		}{
			{"window", window},
			{"hooks", hooks},
			{"http_drain", drain},
			{"join", join},
			{"closers", closers},
			{"total", window + drain + join + closers},
		} {
			want(t, fams, "lameduck_shutdown_step_duration_seconds", map[string]string{"step": step.label}, step.want.Seconds())
		}
		if n := len(fams["lameduck_shutdown_step_duration_seconds"].GetMetric()); n != 6 {
			t.Errorf("lameduck_shutdown_step_duration_seconds has %d series, want 6", n)
		}
	})
}

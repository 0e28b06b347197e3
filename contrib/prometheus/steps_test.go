package ldprometheus_test

import (
	"bytes"
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
// reports it, is the time the step took in testsupport.TimedSteps (a 5s
// window, a 2s hook beside a 4s drain, a write ending 1s after it, a 500ms
// closer). In a synctest bubble, so the times are exact. The same scenario
// as the root package's TestEventsTellEachStepsTime, told by the metric
// instead of the events.
func TestStepDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := testsupport.TimedSteps()
		var logs bytes.Buffer
		cfg := lameduck.Config{
			ShutdownDelay:    st.Window,
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
		testsupport.RunTimedSteps(t, lc, st)

		fams := gather(t, reg)
		for _, step := range []struct {
			label string
			want  time.Duration
		}{
			{"window", st.Window},
			{"hooks", st.Hooks},
			{"http_drain", st.Drain},
			{"join", st.Join},
			{"closers", st.Closers},
			{"total", st.Total()},
		} {
			want(t, fams, "lameduck_shutdown_step_duration_seconds", map[string]string{"step": step.label}, step.want.Seconds())
		}
		if n := len(fams["lameduck_shutdown_step_duration_seconds"].GetMetric()); n != 6 {
			t.Errorf("lameduck_shutdown_step_duration_seconds has %d series, want 6", n)
		}
	})
}

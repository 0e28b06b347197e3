package measure_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/measure"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The list's names follow each side's rules: Prometheus' (a lameduck_
// prefix, _total for counters and only for them, _seconds for durations)
// and OpenTelemetry's (a lameduck. namespace, no unit or _total, a UCUM
// unit); every name is unique on each side.
func TestNamesFollowEachSidesRules(t *testing.T) {
	prom, otel := map[string]bool{}, map[string]bool{}
	for _, m := range measure.All {
		if prom[m.Prom] || otel[m.OTel] {
			t.Errorf("%s / %s listed twice", m.Prom, m.OTel)
		}
		prom[m.Prom], otel[m.OTel] = true, true
		if !strings.HasPrefix(m.Prom, "lameduck_") || (m.Kind == measure.Counter) != strings.HasSuffix(m.Prom, "_total") {
			t.Errorf("%s: a lameduck_ prefix, and _total exactly for counters", m.Prom)
		}
		if (m.Unit == "s") != strings.HasSuffix(m.Prom, "_seconds") {
			t.Errorf("%s: unit %q; durations end in _seconds", m.Prom, m.Unit)
		}
		if !strings.HasPrefix(m.OTel, "lameduck.") || strings.Contains(m.OTel, "_total") || strings.Contains(m.OTel, "seconds") || m.Unit == "" {
			t.Errorf("%s: a lameduck. namespace, no unit in the name, a unit (%q)", m.OTel, m.Unit)
		}
		if m.Help == "" {
			t.Errorf("%s: no help", m.Prom)
		}
	}
}

// A probe's label is its path as the Lifecycle resolved it: renamed paths
// keep their own label, and the defaults' (/livez among them) too.
func TestProbePath(t *testing.T) {
	for _, tc := range []struct {
		cfg  lameduck.Config
		want map[string]string
	}{
		{lameduck.Config{}, map[string]string{"/healthz": "/healthz", "/livez": "/livez", "/readyz": "/readyz",
			"/readyz/db": "/readyz/*", "/startupz": "/startupz", "/prestop": "/prestop", "/nope": "other", "/-/ready": "other"}},
		{lameduck.Config{ReadinessPath: "/-/ready", LivenessPaths: []string{"/-/live"}}, map[string]string{
			"/-/live": "/-/live", "/-/ready": "/-/ready", "/-/ready/db": "/-/ready/*", "/readyz": "other", "/healthz": "other"}},
	} {
		tc.cfg.LookupEnv = func(string) (string, bool) { return "", false } // not the process's environment
		res, errs := lameduck.Resolve(tc.cfg)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		for in, want := range tc.want {
			if got := measure.ProbePath(&res.Config, in); got != want {
				t.Errorf("ProbePath(%q) = %q; want %q", in, got, want)
			}
		}
	}
}

type sink struct {
	results, durations []string
	steps              map[string]time.Duration
}

func (s *sink) CheckResult(c string, o health.Outcome) {
	s.results = append(s.results, c+"="+string(o))
}
func (s *sink) CheckDuration(c string, _ time.Duration) { s.durations = append(s.durations, c) }
func (s *sink) ProbeAnswer(string, int)                 {}
func (s *sink) StepEnded(step string, d time.Duration)  { s.steps[step] = d }
func (s *sink) Cut(int)                                 {}
func (s *sink) Abandoned(int)                           {}

// A stalled verdict counts as a result and has no duration; the steps are
// measured from the later of the events they start at.
func TestTracker(t *testing.T) {
	s := &sink{steps: map[string]time.Duration{}}
	tr := measure.NewTracker(s)
	tr.Observe(lameduck.Transition{Kind: lameduck.TransitionCheck, Check: health.Result{Name: "db", Outcome: health.OutcomeStalled, Critical: true}})
	if len(s.results) != 1 || len(s.durations) != 0 || tr.Checks()["db"] != (measure.CheckState{Outcome: health.OutcomeStalled, Critical: true}) {
		t.Fatalf("results %v, durations %v, checks %v", s.results, s.durations, tr.Checks())
	}
	lc, err := lameduck.New(lameduck.Config{IgnoreSignals: true, LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	es, t0 := lc.Events(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fire := func(e *lameduck.Event, after time.Duration, p lameduck.Phase) {
		tr.Observe(lameduck.Transition{Kind: lameduck.TransitionEvent, Event: e, At: t0.Add(after), Phase: p})
	}
	fire(es.ShutdownInitiated, 0, lameduck.PhaseDraining)
	fire(es.WindowEnded, 2*time.Second, lameduck.PhaseStopping)
	fire(es.HTTPDrained, 3*time.Second, lameduck.PhaseStopping)
	fire(es.HooksDone, 5*time.Second, lameduck.PhaseStopping)
	fire(es.Joined, 6*time.Second, lameduck.PhaseStopping)
	fire(es.Stopped, 7*time.Second, lameduck.PhaseStopped)
	want := map[string]time.Duration{"window": 2 * time.Second, "http_drain": time.Second, "hooks": 3 * time.Second,
		"join": time.Second, "closers": time.Second, "total": 7 * time.Second}
	for k, v := range want {
		if s.steps[k] != v {
			t.Errorf("step %s = %s; want %s", k, s.steps[k], v)
		}
	}
	if tr.Phase() != lameduck.PhaseStopped {
		t.Errorf("Phase = %s with no Lifecycle named; want the events' stopped", tr.Phase())
	}
	// Once a Transition names the Lifecycle: its phase, or the event's
	// when the event came first (the Lifecycle reports an event a moment
	// before its phase follows); its requests in flight and maintenance
	// switch. A second Lifecycle named later is not read.
	tr = measure.NewTracker(s)
	if _, ok := tr.InFlight(); ok {
		t.Error("InFlight reported before a Transition named the Lifecycle")
	}
	if _, ok := tr.Maintenance(); ok {
		t.Error("Maintenance reported before a Transition named the Lifecycle")
	}
	tr.Observe(lameduck.Transition{Kind: lameduck.TransitionProbe, Path: "/healthz", Code: 200, Lifecycle: lc})
	if tr.Phase() != lameduck.PhaseStarting {
		t.Errorf("Phase = %s once named; want the Lifecycle's own (starting)", tr.Phase())
	}
	other, err := lameduck.New(lameduck.Config{IgnoreSignals: true, LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	other.BeginShutdown("test") // draining: read, it would show
	tr.Observe(lameduck.Transition{Kind: lameduck.TransitionProbe, Path: "/healthz", Code: 200, Lifecycle: other})
	if tr.Phase() != lameduck.PhaseStarting {
		t.Errorf("Phase = %s after a second Lifecycle was named; want the first one's (starting)", tr.Phase())
	}
	fire(es.WindowEnded, 2*time.Second, lameduck.PhaseStopping)
	if tr.Phase() != lameduck.PhaseStopping {
		t.Errorf("Phase = %s after window-ended, the Lifecycle still starting; want stopping", tr.Phase())
	}
	if n, ok := tr.InFlight(); !ok || n != 0 {
		t.Errorf("InFlight = %d, %v once named", n, ok)
	}
	if v, ok := tr.Maintenance(); !ok || v != 0 {
		t.Errorf("Maintenance = %d, %v once named", v, ok)
	}
}

// Attach keeps the hook a Config already had, and calls it first.
func TestAttachChainsAfterTheHookSet(t *testing.T) {
	s := &sink{steps: map[string]time.Duration{}}
	tr := measure.NewTracker(s)
	var order []string
	cfg := lameduck.Config{OnTransition: func(lameduck.Transition) { order = append(order, "user") }}
	tr.Attach(&cfg)
	cfg.OnTransition(lameduck.Transition{Kind: lameduck.TransitionCheck, Check: health.Result{Name: "db", Outcome: health.OutcomeOK}})
	if len(order) != 1 || len(s.results) != 1 {
		t.Fatalf("user hook calls %v, tracker results %v; want one each", order, s.results)
	}
	var bare lameduck.Config
	tr.Attach(&bare)
	bare.OnTransition(lameduck.Transition{Kind: lameduck.TransitionCheck, Check: health.Result{Name: "db", Outcome: health.OutcomeOK}})
	if len(s.results) != 2 {
		t.Fatalf("tracker results %v after a Config without a hook; want two", s.results)
	}
}

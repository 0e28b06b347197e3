package lameduck_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// resolveList resolves a container's environment as lameduck vet does:
// "KEY=value" entries, a later one winning.
func resolveList(cfg lameduck.Config, kv ...string) (lameduck.Resolved, []error) {
	cfg.LookupEnv, cfg.Environ = testsupport.EnvList(kv)
	return lameduck.Resolve(cfg)
}

func TestResolveReturnsEveryProblemAsConfigErrors(t *testing.T) {
	res, errs := resolveList(lameduck.Config{},
		"KUBERNETES_SERVICE_HOST=10.0.0.1",
		"LAMEDUCK_SHUTDOWN_DELAY=5",
		"LAMEDUCK_SHUTDOWN_TEARDOWN=0s",
		"LAMEDUCK_DRAIN_MODE=fast",
		"LAMEDUCK_SHUTDOWN_DELAYS=5s",
		"LAMEDUCK_JOIN_BUDGET=1h")
	want := []string{"LAMEDUCK_SHUTDOWN_DELAYS", "LAMEDUCK_SHUTDOWN_DELAY", "LAMEDUCK_SHUTDOWN_TEARDOWN", "LAMEDUCK_DRAIN_MODE", "LAMEDUCK_JOIN_BUDGET"}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d: %v", len(errs), len(want), errs)
	}
	for i, err := range errs {
		var ce *lameduck.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("error %d %v is not a *ConfigError", i, err)
		}
		if ce.Setting != want[i] || ce.Fix == "" || ce.Problem == "" {
			t.Errorf("error %d: %+v; want setting %s with a problem and a fix", i, ce, want[i])
		}
	}
	// Refused values count as unset: the rest is still resolved.
	if c := res.Config; c.Env != lameduck.EnvKubernetes || c.ShutdownDelay != 5*time.Second || c.ShutdownTeardown != 22*time.Second {
		t.Fatalf("resolved %s %s %s; want the defaults in place of the refused values", c.Env, c.ShutdownDelay, c.ShutdownTeardown)
	}
	// New returns the very same errors, joined.
	cfg := lameduck.Config{}
	cfg.LookupEnv, cfg.Environ = testsupport.EnvList([]string{"LAMEDUCK_SHUTDOWN_DELAY=5", "LAMEDUCK_SHUTDOWN_TEARDOWN=0s"})
	_, err := lameduck.New(cfg)
	_, errs = resolveList(lameduck.Config{}, "LAMEDUCK_SHUTDOWN_DELAY=5", "LAMEDUCK_SHUTDOWN_TEARDOWN=0s")
	if err == nil || err.Error() != errors.Join(errs...).Error() {
		t.Fatalf("New = %v\nResolve = %v", err, errs)
	}
}

func TestBudgetArithmeticAndRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      lameduck.Config
		env      []string
		total    time.Duration
		grace    time.Duration
		known    bool
		fits     bool
		margin   time.Duration
		teardown string // its rule
		says     string
	}{
		{"kubernetes, grace unknown", lameduck.Config{}, []string{"KUBERNETES_SERVICE_HOST=10.0.0.1"},
			27 * time.Second, 30 * time.Second, false, true, 3 * time.Second,
			"default: Kubernetes' default terminationGracePeriodSeconds 30s − preStop 0s − window 5s − margin 3s",
			"shutdown budget delay 5s + teardown 22s = 27s ≤ Kubernetes' default terminationGracePeriodSeconds 30s (margin 3s; set LAMEDUCK_TERMINATION_GRACE to the pod's value)"},
		{"grace and preStop given", lameduck.Config{}, []string{"KUBERNETES_SERVICE_HOST=10.0.0.1", "LAMEDUCK_TERMINATION_GRACE=60s", "LAMEDUCK_PRESTOP_DELAY=10s"},
			54 * time.Second, 60 * time.Second, true, true, 6 * time.Second,
			"default: terminationGracePeriodSeconds 1m0s − preStop 10s − window 5s − margin 6s",
			"shutdown budget preStop 10s + delay 5s + teardown 39s = 54s ≤ terminationGracePeriodSeconds 1m0s (margin 6s)"},
		{"explicit teardown too long", lameduck.Config{ShutdownTeardown: 30 * time.Second}, []string{"LAMEDUCK_ENV=kubernetes", "LAMEDUCK_TERMINATION_GRACE=30s"},
			35 * time.Second, 30 * time.Second, true, false, -5 * time.Second,
			"Config.ShutdownTeardown",
			"shutdown budget does not fit: delay 5s + teardown 30s = 35s > terminationGracePeriodSeconds 30s; the kubelet will SIGKILL the pod mid-teardown; lower LAMEDUCK_SHUTDOWN_DELAY or LAMEDUCK_SHUTDOWN_TEARDOWN, or raise terminationGracePeriodSeconds to at least 35s"},
		{"idle drain, grace unknown", lameduck.Config{}, []string{"LAMEDUCK_ENV=kubernetes", "LAMEDUCK_DRAIN_MODE=idle"},
			31 * time.Second, 30 * time.Second, false, false, -time.Second,
			"default: Kubernetes' default terminationGracePeriodSeconds 30s − preStop 0s − window 30s − margin 3s = -3s, raised to the 1s minimum",
			"shutdown budget idle drain bound 30s + teardown 1s = 31s exceeds Kubernetes' default terminationGracePeriodSeconds 30s; set LAMEDUCK_TERMINATION_GRACE to the pod's value to check it, and lower LAMEDUCK_DRAIN_TIMEOUT or LAMEDUCK_SHUTDOWN_TEARDOWN, or raise terminationGracePeriodSeconds to at least 31s"},
		{"local", lameduck.Config{}, nil,
			60 * time.Second, 0, false, true, 0,
			"default outside Kubernetes",
			"shutdown budget delay 0s + teardown 1m0s = 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, errs := resolveList(tc.cfg, tc.env...)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			b := lameduck.Budget(res)
			if b.Total != tc.total || b.Grace != tc.grace || b.GraceKnown != tc.known || b.Fits != tc.fits || b.Margin != tc.margin {
				t.Errorf("total %s grace %s known %v fits %v margin %s; want %s %s %v %v %s",
					b.Total, b.Grace, b.GraceKnown, b.Fits, b.Margin, tc.total, tc.grace, tc.known, tc.fits, tc.margin)
			}
			if got := b.Sources["SHUTDOWN_TEARDOWN"]; got != tc.teardown {
				t.Errorf("teardown rule %q; want %q", got, tc.teardown)
			}
			if got := b.String(); got != tc.says {
				t.Errorf("String()\n got %s\nwant %s", got, tc.says)
			}
			if (b.Fix() == "") != tc.fits {
				t.Errorf("Fix() = %q with fits %v", b.Fix(), tc.fits)
			}
		})
	}
}

// lameduck vet checks what the binary will do against the manifest's own
// grace period, which the container may not have been told.
func TestBudgetAgainstAManifestsGrace(t *testing.T) {
	res, _ := resolveList(lameduck.Config{}, "KUBERNETES_SERVICE_HOST=10.0.0.1")
	b := lameduck.Budget(res).Against(20 * time.Second)
	if b.Fits || b.Margin != -7*time.Second || !b.GraceKnown || b.Teardown != 22*time.Second {
		t.Fatalf("%+v", b)
	}
	if !strings.Contains(b.String(), "does not fit: delay 5s + teardown 22s = 27s > terminationGracePeriodSeconds 20s") {
		t.Fatal(b.String())
	}
}

// TestBudgetWithPreStop: a preStop sleep the process was not told about
// (no LAMEDUCK_PRESTOP_DELAY) adds to the total without changing the
// teardown the process derived, and can push the sum past the grace period.
func TestBudgetWithPreStop(t *testing.T) {
	res, errs := resolveList(lameduck.Config{}, "KUBERNETES_SERVICE_HOST=10.0.0.1", "LAMEDUCK_TERMINATION_GRACE=30s")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	b := lameduck.Budget(res) // 5s + (30s − 5s − 3s = 22s) = 27s ≤ 30s
	if !b.Fits || b.Total != 27*time.Second {
		t.Fatalf("budget %v: want 27s that fits", b)
	}
	b = b.WithPreStop(5 * time.Second)
	if b.Fits || b.Total != 32*time.Second || b.Teardown != 22*time.Second || b.Margin != -2*time.Second || !b.GraceKnown {
		t.Errorf("with a 5s preStop sleep: %+v; want total 32s, teardown 22s, margin -2s, not fitting", b)
	}
	if !strings.Contains(b.Fix(), "the preStop sleep") || !strings.Contains(b.Fix(), "at least 32s") {
		t.Errorf("fix %q: want it to name the preStop sleep and 32s", b.Fix())
	}
	if got := b.WithPreStop(0).Against(40 * time.Second); !got.Fits || got.Total != 27*time.Second {
		t.Errorf("without the sleep, against 40s: %+v", got)
	}
	// A sleep near the largest time.Duration: the sum saturates rather than
	// wrapping to a negative total that fits.
	if got := b.WithPreStop(math.MaxInt64 - time.Second); got.Fits || got.Total != math.MaxInt64 {
		t.Errorf("with a preStop sleep of MaxInt64 − 1s: %+v; want a saturated total that does not fit", got)
	}
}

package lameduck_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
)

func newFromEnv(t *testing.T, vars map[string]string, cfg lameduck.Config) (*lameduck.Lifecycle, error) {
	t.Helper()
	cfg.LookupEnv = env(vars)
	cfg.Environ = func() []string {
		var out []string
		for k, v := range vars {
			out = append(out, k+"="+v)
		}
		return out
	}
	return lameduck.New(cfg)
}

func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name            string
		vars            map[string]string
		delay, teardown time.Duration
		env             string
	}{
		{"local", nil, lameduck.NoDelay, 60 * time.Second, lameduck.EnvLocal},
		// Kubernetes' default grace 30s − delay 5s − margin 3s.
		{"detected kubernetes", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, 5 * time.Second, 22 * time.Second, lameduck.EnvKubernetes},
		{"declared kubernetes", map[string]string{"LAMEDUCK_ENV": "kubernetes"}, 5 * time.Second, 22 * time.Second, lameduck.EnvKubernetes},
		{"declared in any case", map[string]string{"LAMEDUCK_ENV": "Kubernetes"}, 5 * time.Second, 22 * time.Second, lameduck.EnvKubernetes},
		{"declared local inside kubernetes", map[string]string{"LAMEDUCK_ENV": "LOCAL", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}, lameduck.NoDelay, 60 * time.Second, lameduck.EnvLocal},
		{"zero delay in kubernetes", map[string]string{"LAMEDUCK_ENV": "kubernetes", "LAMEDUCK_SHUTDOWN_DELAY": "0s"}, lameduck.NoDelay, 27 * time.Second, lameduck.EnvKubernetes},
		{"empty means unset", map[string]string{"LAMEDUCK_ENV": "kubernetes", "LAMEDUCK_SHUTDOWN_DELAY": ""}, 5 * time.Second, 22 * time.Second, lameduck.EnvKubernetes},
		// A known grace: 60s − delay 5s − margin 6s.
		{"grace known", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "LAMEDUCK_TERMINATION_GRACE": "60s"}, 5 * time.Second, 49 * time.Second, lameduck.EnvKubernetes},
		// 60s − preStop 10s − delay 5s − margin 6s.
		{"grace and preStop known", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "LAMEDUCK_TERMINATION_GRACE": "60s", "LAMEDUCK_PRESTOP_DELAY": "10s"}, 5 * time.Second, 39 * time.Second, lameduck.EnvKubernetes},
		// 10m − delay 5s − margin 10s (the margin's ceiling).
		{"long grace", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "LAMEDUCK_TERMINATION_GRACE": "10m"}, 5 * time.Second, 10*time.Minute - 15*time.Second, lameduck.EnvKubernetes},
		// 6s − delay 5s − margin 2s < 1s: the floor.
		{"grace too short", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "LAMEDUCK_TERMINATION_GRACE": "6s"}, 5 * time.Second, time.Second, lameduck.EnvKubernetes},
		// The idle drain's bound is the window: 60s − 30s − 6s.
		{"idle drain", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "LAMEDUCK_TERMINATION_GRACE": "60s", "LAMEDUCK_DRAIN_MODE": "IDLE"}, 5 * time.Second, 24 * time.Second, lameduck.EnvKubernetes},
		// A known grace outside Kubernetes is still the bound.
		{"grace known locally", map[string]string{"LAMEDUCK_TERMINATION_GRACE": "20s"}, lameduck.NoDelay, 18 * time.Second, lameduck.EnvLocal},
		{"explicit", map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "250ms", "LAMEDUCK_SHUTDOWN_TEARDOWN": "2m"}, 250 * time.Millisecond, 2 * time.Minute, lameduck.EnvLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc, err := newFromEnv(t, tc.vars, lameduck.Config{})
			if err != nil {
				t.Fatal(err)
			}
			c := lc.Config()
			if c.ShutdownDelay != tc.delay || c.ShutdownTeardown != tc.teardown || c.Env != tc.env {
				t.Fatalf("got delay %s teardown %s env %s; want %s %s %s", c.ShutdownDelay, c.ShutdownTeardown, c.Env, tc.delay, tc.teardown, tc.env)
			}
		})
	}
}

func TestConfigCodeWinsOverEnvironment(t *testing.T) {
	lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "9s", "LAMEDUCK_SHUTDOWN_TEARDOWN": "9s"},
		lameduck.Config{ShutdownDelay: lameduck.NoDelay, ShutdownTeardown: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c := lc.Config(); c.ShutdownDelay != lameduck.NoDelay || c.ShutdownTeardown != 2*time.Second {
		t.Fatalf("environment overrode the code: %+v", c)
	}
}

func TestConfigPrefix(t *testing.T) {
	lc, err := newFromEnv(t, map[string]string{"SHOP_SHUTDOWN_DELAY": "3s", "LAMEDUCK_SHUTDOWN_DELAY": "9s"},
		lameduck.Config{EnvPrefix: "SHOP_"})
	if err != nil {
		t.Fatal(err)
	}
	if d := lc.Config().ShutdownDelay; d != 3*time.Second {
		t.Fatalf("delay %s, want 3s from SHOP_SHUTDOWN_DELAY", d)
	}
}

func TestConfigErrorsNameSettingValueAndFix(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		cfg  lameduck.Config
		want []string
	}{
		{map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "5"}, lameduck.Config{}, []string{`LAMEDUCK_SHUTDOWN_DELAY="5"`, "needs a unit", "5s"}},
		{map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "-1s"}, lameduck.Config{}, []string{`LAMEDUCK_SHUTDOWN_DELAY="-1s"`, "must not be negative"}},
		{map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "soon"}, lameduck.Config{}, []string{`LAMEDUCK_SHUTDOWN_DELAY="soon"`, "not a Go duration"}},
		{map[string]string{"LAMEDUCK_SHUTDOWN_TEARDOWN": "0s"}, lameduck.Config{}, []string{`LAMEDUCK_SHUTDOWN_TEARDOWN="0s"`, "greater than zero"}},
		{map[string]string{"LAMEDUCK_SHUTDOWN_TEARDOWN": "30"}, lameduck.Config{}, []string{`LAMEDUCK_SHUTDOWN_TEARDOWN="30"`, "30s"}},
		{map[string]string{"LAMEDUCK_TERMINATION_GRACE": "60"}, lameduck.Config{}, []string{`LAMEDUCK_TERMINATION_GRACE="60"`, "60s"}},
		{map[string]string{"LAMEDUCK_ENV": "prod"}, lameduck.Config{}, []string{`LAMEDUCK_ENV="prod"`, `"kubernetes" or "local"`}},
		{nil, lameduck.Config{Env: "prod"}, []string{`Config.Env=prod`, `"kubernetes" or "local"`}},
		{nil, lameduck.Config{DrainMode: "fast"}, []string{`Config.DrainMode=fast`, `"delay" or "idle"`}},
		{map[string]string{"LAMEDUCK_PRESTOP_DELAY": "-1s"}, lameduck.Config{}, []string{`LAMEDUCK_PRESTOP_DELAY="-1s"`, "must not be negative", `such as "5s"`}},
		{map[string]string{"LAMEDUCK_STARTUP_TIMEOUT": "0s"}, lameduck.Config{}, []string{`LAMEDUCK_STARTUP_TIMEOUT="0s"`, "greater than zero", "failureThreshold × periodSeconds"}},
		{map[string]string{"LAMEDUCK_PRESTOP": "yes please"}, lameduck.Config{}, []string{`LAMEDUCK_PRESTOP="yes please"`, "boolean"}},
		{map[string]string{"LAMEDUCK_SHUTDOWN_DELAYS": "5s"}, lameduck.Config{}, []string{`LAMEDUCK_SHUTDOWN_DELAYS="5s": not a lameduck setting`, "LAMEDUCK_SHUTDOWN_DELAY,"}},
		{map[string]string{"LAMEDUCK_DRAIN_MODE": "fast"}, lameduck.Config{}, []string{`LAMEDUCK_DRAIN_MODE="fast"`, `"delay" or "idle"`}},
		{map[string]string{"LAMEDUCK_IDLE_WINDOW": "0s"}, lameduck.Config{}, []string{`LAMEDUCK_IDLE_WINDOW="0s"`, "greater than zero"}},
		{map[string]string{"LAMEDUCK_DRAIN_MODE": "idle", "LAMEDUCK_SHUTDOWN_DELAY": "10s", "LAMEDUCK_DRAIN_TIMEOUT": "5s"}, lameduck.Config{}, []string{`LAMEDUCK_DRAIN_TIMEOUT="5s": shorter than LAMEDUCK_SHUTDOWN_DELAY=10s`, "raise it to at least 10s"}},
		{map[string]string{"LAMEDUCK_JOIN_BUDGET": "2s", "LAMEDUCK_SHUTDOWN_TEARDOWN": "1s"}, lameduck.Config{}, []string{`LAMEDUCK_JOIN_BUDGET="2s": must be less than the teardown budget 1s`, "unset it"}},
		{map[string]string{"LAMEDUCK_HOOK_SHARE": "1.5"}, lameduck.Config{}, []string{`LAMEDUCK_HOOK_SHARE="1.5"`, "between 0 and 1"}},
		{map[string]string{"LAMEDUCK_CHECK_TIMEOUT": "5"}, lameduck.Config{}, []string{`LAMEDUCK_CHECK_TIMEOUT="5"`, "needs a unit"}},
		{map[string]string{"LAMEDUCK_CHECK_MAX_AGE": "5"}, lameduck.Config{}, []string{`LAMEDUCK_CHECK_MAX_AGE="5"`, "needs a unit"}},
		{map[string]string{"LAMEDUCK_CHECK_MAX_AGE": "-1s"}, lameduck.Config{}, []string{`LAMEDUCK_CHECK_MAX_AGE="-1s"`, "must not be negative", `or "0s" to ping on every probe`}},
		{map[string]string{"LAMEDUCK_SEND_RETRY_AFTER": "maybe"}, lameduck.Config{}, []string{`LAMEDUCK_SEND_RETRY_AFTER="maybe"`, "boolean"}},
		{nil, lameduck.Config{JoinBudget: -time.Second}, []string{"Config.JoinBudget=-1s"}},
		{nil, lameduck.Config{ShutdownDelay: -time.Second}, []string{"Config.ShutdownDelay=-1s", "NoDelay"}},
		{nil, lameduck.Config{ShutdownTeardown: -time.Second}, []string{"Config.ShutdownTeardown=-1s"}},
	} {
		_, err := newFromEnv(t, tc.vars, tc.cfg)
		if !errors.As(err, new(*lameduck.ConfigError)) {
			t.Errorf("%v %+v: err = %v, want a *ConfigError", tc.vars, tc.cfg, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not contain %q", tc.vars, err, w)
			}
		}
		if !strings.HasPrefix(err.Error(), "lameduck: ") {
			t.Errorf("error %q does not begin with lameduck:", err)
		}
	}
}

func TestConfigReportsEveryBadSetting(t *testing.T) {
	_, err := newFromEnv(t, map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "5", "LAMEDUCK_SHUTDOWN_TEARDOWN": "0s"}, lameduck.Config{})
	if err == nil || !strings.Contains(err.Error(), "SHUTDOWN_DELAY") || !strings.Contains(err.Error(), "SHUTDOWN_TEARDOWN") {
		t.Fatalf("want both settings named, got %v", err)
	}
}

func TestConfigPreStopToken(t *testing.T) {
	lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_PRESTOP_TOKEN": "x"}, lameduck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !lc.Config().PreStop {
		t.Fatal("a token does not enable the preStop hook")
	}
}

// Run's first line is Resolved.Budget's verdict, with the rule that chose
// each number.
func TestBudgetLogSaysWhichRuleChoseEachNumber(t *testing.T) {
	h := newHarness(t, lameduck.Config{Env: lameduck.EnvKubernetes})
	h.lc.BeginShutdown("test")
	h.run()
	h.waitOK(t)
	for _, want := range []string{
		"shutdown budget delay 5s + teardown 22s = 27s ≤ Kubernetes' default terminationGracePeriodSeconds 30s (margin 3s",
		`window_rule="default in Kubernetes"`,
		`teardown_rule="default: Kubernetes' default terminationGracePeriodSeconds 30s − preStop 0s − window 5s − margin 3s"`,
		`grace_rule="unknown: Kubernetes' default assumed"`,
		`join_budget="what the teardown leaves"`,
	} {
		if !strings.Contains(h.logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, h.logs)
		}
	}
}

func TestBudgetLog(t *testing.T) {
	for _, tc := range []struct {
		grace time.Duration
		env   string
		want  string
	}{
		{60 * time.Second, "", "shutdown budget delay 5s + teardown 30s = 35s ≤ terminationGracePeriodSeconds 1m0s"},
		{0, lameduck.EnvKubernetes, "shutdown budget delay 5s + teardown 30s = 35s exceeds Kubernetes' default terminationGracePeriodSeconds 30s; set LAMEDUCK_TERMINATION_GRACE"},
		{30 * time.Second, "", "does not fit: delay 5s + teardown 30s = 35s > terminationGracePeriodSeconds 30s; the kubelet will SIGKILL the pod mid-teardown; lower LAMEDUCK_SHUTDOWN_DELAY or LAMEDUCK_SHUTDOWN_TEARDOWN, or raise terminationGracePeriodSeconds to at least 35s"},
	} {
		h := newHarness(t, lameduck.Config{ShutdownDelay: 5 * time.Second, ShutdownTeardown: 30 * time.Second, TerminationGrace: tc.grace, Env: tc.env})
		h.lc.BeginShutdown("test") // before Run: never ready, so no window to wait
		h.run()
		h.waitOK(t)
		if !strings.Contains(h.logs.String(), tc.want) {
			t.Errorf("log lacks %q:\n%s", tc.want, h.logs)
		}
	}
}

func TestConfigHookShareRejectsNaN(t *testing.T) {
	for _, v := range []string{"NaN", "Inf", "-Inf", "0", "1"} {
		if _, err := newFromEnv(t, map[string]string{"LAMEDUCK_HOOK_SHARE": v}, lameduck.Config{}); !errors.As(err, new(*lameduck.ConfigError)) {
			t.Errorf("LAMEDUCK_HOOK_SHARE=%s accepted", v)
		}
	}
	if _, err := newFromEnv(t, nil, lameduck.Config{HookShare: math.NaN()}); !errors.As(err, new(*lameduck.ConfigError)) {
		t.Error("Config.HookShare=NaN accepted")
	}
}

func TestConfigOwnPrefixSharesTheApplicationsVariables(t *testing.T) {
	lc, err := newFromEnv(t, map[string]string{"MYAPP_DATABASE_URL": "postgres://x", "MYAPP_SHUTDOWN_DELAY": "2s"},
		lameduck.Config{EnvPrefix: "MYAPP_"})
	if err != nil {
		t.Fatalf("an application's own MYAPP_ variable was refused: %v", err)
	}
	if lc.Config().ShutdownDelay != 2*time.Second {
		t.Fatal("MYAPP_SHUTDOWN_DELAY not read")
	}
}

// Parsing rules of the configuration: booleans as true/false, 1/0, t/f in
// lower, upper or title case; surrounding spaces trimmed; an empty value is
// unset; an unknown LAMEDUCK_ name is an error even when empty.
func TestSettingValuesParseAsDocumented(t *testing.T) {
	for _, v := range []string{"true", "TRUE", "True", "1", "t", "T", " true "} {
		lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_SEND_RETRY_AFTER": v}, lameduck.Config{})
		if err != nil || !lc.Config().SendRetryAfter {
			t.Errorf("LAMEDUCK_SEND_RETRY_AFTER=%q: %v; want true", v, err)
		}
	}
	for _, v := range []string{"false", "FALSE", "False", "0", "f", "F"} {
		lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_SEND_RETRY_AFTER": v}, lameduck.Config{})
		if err != nil || lc.Config().SendRetryAfter {
			t.Errorf("LAMEDUCK_SEND_RETRY_AFTER=%q: %v; want false", v, err)
		}
	}
	lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "  2s\t", "LAMEDUCK_CHECK_TIMEOUT": " "}, lameduck.Config{})
	if err != nil || lc.Config().ShutdownDelay != 2*time.Second || lc.Config().CheckTimeout != time.Second {
		t.Fatalf("spaces around 2s, a blank CHECK_TIMEOUT: %v %+v; want 2s and the 1s default", err, lc.Config())
	}
	if _, err := newFromEnv(t, map[string]string{"LAMEDUCK_SHUTDOWN_DELAYS": ""}, lameduck.Config{}); !errors.As(err, new(*lameduck.ConfigError)) ||
		!strings.Contains(err.Error(), "LAMEDUCK_SHUTDOWN_DELAYS") {
		t.Fatalf("an empty unknown LAMEDUCK_ name: %v; want an error naming it", err)
	}
}

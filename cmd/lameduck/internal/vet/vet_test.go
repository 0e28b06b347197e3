package vet

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/grace"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplitDocumentsKeepsLines(t *testing.T) {
	in := "# leading comment\n---\na: 1\n--- # second\n\n---\nb: 2\nc: 3\n---\n"
	docs, err := splitDocuments("f.yaml", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].line != 3 || docs[1].line != 7 || string(docs[1].data) != "b: 2\nc: 3\n" {
		t.Fatalf("docs %+v", docs)
	}
}

func TestPreStopTime(t *testing.T) {
	hook := func(h corev1.LifecycleHandler) corev1.Container {
		return corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &h}}
	}
	exec := func(cmd ...string) corev1.Container {
		return hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}})
	}
	for _, c := range []struct {
		c                       corev1.Container
		want                    time.Duration
		sleep, forever, unknown bool
	}{
		{corev1.Container{}, 0, false, false, false},
		{exec("sleep", "5"), 5 * time.Second, true, false, false},
		{exec("/bin/sh", "-c", "echo bye; sleep 2.5"), 2500 * time.Millisecond, true, false, false},
		{exec("/bin/sleep", "7"), 7 * time.Second, true, false, false},
		{exec("nginx", "-s", "quit"), 0, false, false, false},
		// GNU sleep's units, fractions, and operands summed.
		{exec("sleep", "1m"), time.Minute, true, false, false},
		{exec("sleep", "0.5m"), 30 * time.Second, true, false, false},
		{exec("sleep", "1h"), time.Hour, true, false, false},
		{exec("sleep", "1d"), 24 * time.Hour, true, false, false},
		{exec("sleep", "5s"), 5 * time.Second, true, false, false},
		{exec("sleep", ".5"), 500 * time.Millisecond, true, false, false},
		{exec("sleep", "1e1"), 10 * time.Second, true, false, false},
		{exec("sleep", "1m", "30s"), 90 * time.Second, true, false, false},
		{exec("/bin/sh", "-c", "sleep 1m 5 && kill -TERM 1"), 65 * time.Second, true, false, false},
		{exec("/bin/sh", "-c", "sleep 5; nginx -s quit; sleep 3"), 8 * time.Second, true, false, false},
		{exec("sh", "-c", "sleep \"10\""), 10 * time.Second, true, false, false},
		{exec("sleep", "infinity"), math.MaxInt64, true, true, false},
		{exec("sleep", "inf"), math.MaxInt64, true, true, false},
		{exec("sleep", "99999999999999999999"), math.MaxInt64, true, true, false},
		{exec("sleep", "1e400"), math.MaxInt64, true, true, false},
		{exec("/bin/sh", "-c", "sleep $DELAY"), 0, true, false, true},
		{exec("/bin/sh", "-c", "sleep 5 >/dev/null 2>&1; kill 1"), 5 * time.Second, true, false, false},
		{hook(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 4}}), 4 * time.Second, false, false, false},
		{hook(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: math.MaxInt64}}), math.MaxInt64, false, true, false},
		{hook(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/prestop"}}), 0, false, false, false},
	} {
		p := preStopTime(c.c)
		if p.d != c.want || p.execSleep != c.sleep || p.forever != c.forever || p.unknown != c.unknown {
			t.Errorf("%+v: %s, exec sleep %v, forever %v, unknown %v; want %s, %v, %v, %v",
				c.c.Lifecycle, p.d, p.execSleep, p.forever, p.unknown, c.want, c.sleep, c.forever, c.unknown)
		}
	}
}

// TestGraceUsesTheBinarysDefaults: with no LAMEDUCK_SHUTDOWN_TEARDOWN the
// teardown is the one the binary derives in a pod (grace − window −
// margin), so Kubernetes' default 30s fits the default window.
func TestGraceUsesTheBinarysDefaults(t *testing.T) {
	grace := int64(30)
	o := appPod(grace, corev1.Container{
		Env:            []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}},
		ReadinessProbe: httpReadiness("/readyz"),
	})
	if fs, n := Check([]Object{o}, Options{}); n != 1 || len(fs) != 0 {
		t.Fatalf("checked %d, findings %+v; want one clean container", n, fs)
	}
	o.Spec.Containers[0].Env = append(o.Spec.Containers[0].Env, corev1.EnvVar{Name: "LAMEDUCK_SHUTDOWN_TEARDOWN", Value: "30s"})
	fs, _ := Check([]Object{o}, Options{})
	if len(fs) != 1 || fs[0].Rule != "grace-period" || !strings.Contains(fs[0].Message, "delay 5s + teardown 30s = 35s > terminationGracePeriodSeconds 30") {
		t.Fatalf("findings %+v; want grace-period with the sum", fs)
	}
}

// vet's budget is the one the binary logs when Run starts: the same resolved
// settings, mapped onto internal/grace the same way, for every shape of
// the window.
func TestBudgetIsTheBinarysStartupLine(t *testing.T) {
	for _, env := range [][]string{
		nil,
		{"LAMEDUCK_TERMINATION_GRACE=45s", "LAMEDUCK_PRESTOP_DELAY=3s"},
		{"LAMEDUCK_DRAIN_MODE=idle"},
		{"LAMEDUCK_SHUTDOWN_DELAY=10s", "LAMEDUCK_SHUTDOWN_TEARDOWN=1m"},
		{"LAMEDUCK_ENV=local"},
	} {
		c := corev1.Container{Name: "app"}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
		}
		j := &judged{podContainer: podContainer{c: c}}
		j.resolve()
		if len(j.errs) > 0 {
			t.Fatal(j.errs)
		}
		var log strings.Builder
		cfg := *j.rc
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
		cfg.IgnoreSignals = true
		lc, err := lameduck.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		lc.BeginShutdown("test")
		if err := lc.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := grace.Of(j.settings()).String()
		if !strings.Contains(log.String(), "msg="+strconv.Quote("lameduck: "+want)) {
			t.Errorf("env %q: the binary logged\n%s\nwant the budget line %q", env, log.String(), want)
		}
	}
}

func TestEnvPrefixIsTheResolvers(t *testing.T) {
	res, _ := lameduck.Resolve(lameduck.Config{LookupEnv: func(string) (string, bool) { return "", false }})
	if res.Config.EnvPrefix != envPrefix {
		t.Fatalf("the resolver reads %q; vet judges %q", res.Config.EnvPrefix, envPrefix)
	}
}

// The binary takes its token from tokenHeader: the maintenance switch
// answers 200 with it and 401 without it.
func TestTokenHeaderIsTheBinarys(t *testing.T) {
	token := "0123456789abcdef0123"
	lc, err := lameduck.New(lameduck.Config{LookupEnv: func(string) (string, bool) { return "", false },
		Maintenance: true, PreStopToken: token, IgnoreSignals: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]int{tokenHeader: http.StatusOK, "X-Other-Token": http.StatusUnauthorized} {
		req := httptest.NewRequest(http.MethodPost, "/maintenance/off", nil)
		req.Header.Set(header, token)
		rec := httptest.NewRecorder()
		lc.ProbeHandler().ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("the token in %s: %d; want %d", header, rec.Code, want)
		}
	}
}

// A container's env is read as the kubelet passes it: a later entry of the
// same name wins.
func TestLaterEnvEntryWins(t *testing.T) {
	lookup, _ := envList([]string{"LAMEDUCK_SHUTDOWN_DELAY=1s", "LAMEDUCK_SHUTDOWN_DELAY=2s", "LAMEDUCK_PRESTOP"})
	if v, ok := lookup("LAMEDUCK_SHUTDOWN_DELAY"); !ok || v != "2s" {
		t.Errorf("LAMEDUCK_SHUTDOWN_DELAY = %q, %v; want the later entry, 2s", v, ok)
	}
	if v, ok := lookup("LAMEDUCK_PRESTOP"); !ok || v != "" {
		t.Errorf("LAMEDUCK_PRESTOP = %q, %v; want set and empty", v, ok)
	}
}

// A refused value is the lameduck-setting finding alone: the sums that
// would hold the default in its place (a 5s window for SHUTDOWN_DELAY="10")
// wait until it is fixed, so no fix is given from numbers the user never
// wrote.
func TestRefusedSettingIsNotSummedAsItsDefault(t *testing.T) {
	grace := int64(5)
	o := appPod(grace, corev1.Container{
		Env: []corev1.EnvVar{{Name: "LAMEDUCK_SHUTDOWN_DELAY", Value: "10"}},
		ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3, PeriodSeconds: 10, FailureThreshold: 3,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}},
	})
	fs, n := Check([]Object{o}, Options{})
	if n != 1 || len(fs) != 1 || fs[0].Rule != "lameduck-setting" || !strings.Contains(fs[0].Message, `LAMEDUCK_SHUTDOWN_DELAY="10"`) {
		t.Fatalf("checked %d, findings %+v; want the lameduck-setting finding alone", n, fs)
	}
	o.Spec.Containers[0].Env[0].Value = "10s"
	fs, _ = Check([]Object{o}, Options{})
	rules := map[string]bool{}
	for _, f := range fs {
		rules[f.Rule] = true
		if f.Rule == "grace-period" && !strings.Contains(f.Message, "delay 10s") {
			t.Errorf("grace-period once the value is fixed: %s, want the 10s window in the sum", f.Message)
		}
	}
	if !rules["grace-period"] {
		t.Errorf("findings %+v; want grace-period once the value is accepted", fs)
	}
}

// The preStop token: a hook on the application's port without one is the
// binary's startup error; a token from a mounted file, which vet cannot
// read, counts as a token.
func TestPreStopTokenRule(t *testing.T) {
	pod := func(env ...corev1.EnvVar) Object {
		grace := int64(30)
		return appPod(grace, corev1.Container{
			Env:            append([]corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}}, env...),
			ReadinessProbe: httpReadiness("/readyz"),
		})
	}
	fs, _ := Check([]Object{pod(corev1.EnvVar{Name: "LAMEDUCK_PRESTOP", Value: "true"})}, Options{})
	if len(fs) != 1 || fs[0].Rule != "lameduck-setting" || !strings.Contains(fs[0].Fix, "LAMEDUCK_PRESTOP_TOKEN") || !strings.Contains(fs[0].Fix, "LAMEDUCK_PROBE_ADDR") {
		t.Fatalf("PRESTOP=true without a token: findings %+v; want the binary's refusal naming both fixes", fs)
	}
	if fs, _ := Check([]Object{pod(corev1.EnvVar{Name: "LAMEDUCK_PRESTOP_TOKEN_FILE", Value: "/var/run/secrets/prestop/token"})}, Options{}); len(fs) != 0 {
		t.Fatalf("a token from a mounted file: findings %+v; want none", fs)
	}
	both := pod(corev1.EnvVar{Name: "LAMEDUCK_PRESTOP_TOKEN", Value: "0123456789abcdef0123"},
		corev1.EnvVar{Name: "LAMEDUCK_PRESTOP_TOKEN_FILE", Value: "/var/run/secrets/prestop/token"})
	if fs, _ := Check([]Object{both}, Options{}); len(fs) != 1 || !strings.Contains(fs[0].Message, "set together") {
		t.Fatalf("both a token and a file: findings %+v; want the binary's refusal", fs)
	}
}

// Renamed probe paths (LAMEDUCK_READINESS_PATH, ...) are the paths the
// probes must use.
func TestRenamedProbePaths(t *testing.T) {
	grace := int64(30)
	pod := func(readiness, liveness string) Object {
		return appPod(grace, corev1.Container{
			Env: []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"},
				{Name: "LAMEDUCK_READINESS_PATH", Value: "/-/readyz"}, {Name: "LAMEDUCK_LIVENESS_PATHS", Value: "/-/healthz"}},
			ReadinessProbe: httpReadiness(readiness),
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: liveness}}},
		})
	}
	if fs, _ := Check([]Object{pod("/-/readyz", "/-/healthz")}, Options{}); len(fs) != 0 {
		t.Fatalf("probes on the renamed paths: findings %+v; want none", fs)
	}
	fs, _ := Check([]Object{pod("/readyz", "/-/readyz/db")}, Options{})
	if len(fs) != 2 || fs[0].Rule != "liveness-path" || !strings.Contains(fs[0].Fix, "/-/healthz") ||
		fs[1].Rule != "readiness-path" || !strings.Contains(fs[1].Fix, "httpGet /-/readyz") {
		t.Fatalf("probes on the old paths: findings %+v; want liveness-path and readiness-path naming the renamed paths", fs)
	}
}

// A CHECK_MAX_AGE at or above the readiness probe's detection time
// (periodSeconds × failureThreshold) is a warning with the numbers; one
// well under it is clean.
func TestReadinessMaxAge(t *testing.T) {
	pod := maxAgePod
	if fs, _ := Check([]Object{pod("1s")}, Options{}); len(fs) != 0 {
		t.Fatalf("MaxAge 1s against 2s × 2: findings %+v; want none", fs)
	}
	fs, _ := Check([]Object{pod("5s")}, Options{})
	if len(fs) != 1 || fs[0].Rule != "readiness-max-age" || fs[0].Level != "warning" ||
		!strings.Contains(fs[0].Message, "LAMEDUCK_CHECK_MAX_AGE=5s ≥ readinessProbe periodSeconds × failureThreshold = 4s") ||
		!strings.Contains(fs[0].Fix, "well under 4s") {
		t.Fatalf("MaxAge 5s against 2s × 2: findings %+v", fs)
	}
}

// maxAgePod is a pod whose readiness (every 2s, 2 failures) reuses a
// check's result for maxAge.
func maxAgePod(maxAge string) Object {
	grace := int64(60)
	return appPod(grace, corev1.Container{
		Env:            []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "60s"}, {Name: "LAMEDUCK_CHECK_MAX_AGE", Value: maxAge}},
		ReadinessProbe: httpReadiness("/readyz"),
	})
}

// gRPC probes: liveness must ask "liveness"; readiness any other name
// (docs/grpc.md), and a readiness answer runs the checks, so its timeout
// and CHECK_MAX_AGE rules apply.
func TestGRPCProbes(t *testing.T) {
	grace := int64(30)
	svc := func(s string) *string { return &s }
	pod := func(live, ready *string, env ...corev1.EnvVar) Object {
		return appPod(grace, corev1.Container{
			Env:            append([]corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}}, env...),
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000, Service: live}}},
			ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3, PeriodSeconds: 2, FailureThreshold: 2, ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000, Service: ready}}},
		})
	}
	rules := func(fs []Finding) (ids []string) {
		for _, f := range fs {
			ids = append(ids, f.Rule)
		}
		return ids
	}
	for _, c := range []struct {
		live, ready *string
		want        string
	}{
		{svc("liveness"), svc("readiness"), ""},
		{svc("liveness"), nil, ""},
		{svc("liveness"), svc(""), ""},
		{svc("liveness"), svc("lameduck.demo.Demo"), ""},
		{nil, svc("readiness"), "liveness-path"},
		{svc(""), svc("readiness"), "liveness-path"},
		{svc("readiness"), svc("readiness"), "probes-identical"},
		{svc("lameduck.demo.Demo"), svc("readiness"), "liveness-path"},
		{svc("liveness"), svc("liveness"), "probes-identical"},
		{svc("readiness"), svc("liveness"), "probes-swapped"},
	} {
		fs, _ := Check([]Object{pod(c.live, c.ready)}, Options{})
		if got := strings.Join(rules(fs), " "); got != c.want {
			t.Errorf("liveness %v, readiness %v: rules %q; want %q (%+v)", c.live, c.ready, got, c.want, fs)
		}
	}
	fs, _ := Check([]Object{pod(svc(""), svc("readiness"))}, Options{})
	if len(fs) != 1 || !strings.Contains(fs[0].Message, "NOT_SERVING") || !strings.Contains(fs[0].Fix, "grpc.service: liveness") {
		t.Errorf("liveness on service \"\": %+v", fs)
	}
	fs, _ = Check([]Object{pod(svc("liveness"), svc("readiness"), corev1.EnvVar{Name: "LAMEDUCK_CHECK_TIMEOUT", Value: "5s"},
		corev1.EnvVar{Name: "LAMEDUCK_CHECK_MAX_AGE", Value: "1m"})}, Options{})
	if got := strings.Join(rules(fs), " "); got != "readiness-timeout readiness-max-age" {
		t.Errorf("gRPC readiness with a 5s check deadline and a 1m max age: rules %q; want readiness-timeout readiness-max-age", got)
	}
}

// A readiness probe on a path lameduck does not answer gets 404: the pod
// is never ready, not ready as soon as it listens.
func TestReadinessOnAnUnservedPath(t *testing.T) {
	grace := int64(30)
	pod := func(path string) Object {
		return appPod(grace, corev1.Container{
			Env:            []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}, {Name: "LAMEDUCK_READINESS_PATH", Value: "/ready"}},
			ReadinessProbe: httpReadiness(path),
		})
	}
	fs, _ := Check([]Object{pod("/readyz")}, Options{})
	if len(fs) != 1 || fs[0].Rule != "readiness-path" || !strings.Contains(fs[0].Message, "404") ||
		!strings.Contains(fs[0].Message, "never becomes ready") || strings.Contains(fs[0].Message, "as soon as it listens") ||
		!strings.Contains(fs[0].Fix, "httpGet /ready") {
		t.Errorf("readiness on /readyz with LAMEDUCK_READINESS_PATH=/ready: %+v", fs)
	}
	fs, _ = Check([]Object{pod("/healthz")}, Options{})
	if len(fs) != 1 || fs[0].Rule != "readiness-path" || !strings.Contains(fs[0].Message, "as soon as it listens") {
		t.Errorf("readiness on /healthz: %+v", fs)
	}
}

var negative = regexp.MustCompile(`-[0-9]`)

// Numbers too large for a time.Duration or an int32 product saturate: no
// negative time, no wrapped sum.
func TestHugeNumbersSaturate(t *testing.T) {
	pod := func(grace int64, c corev1.Container) Object {
		c.Env = append(c.Env, corev1.EnvVar{Name: "LAMEDUCK_ENV", Value: "kubernetes"})
		if c.ReadinessProbe == nil {
			c.ReadinessProbe = httpReadiness("/readyz")
		}
		return appPod(grace, c)
	}
	if fs, _ := Check([]Object{pod(10000000000, corev1.Container{})}, Options{}); len(fs) != 0 {
		t.Errorf("terminationGracePeriodSeconds 10000000000: %+v; want none", fs)
	}
	long := corev1.Container{Env: []corev1.EnvVar{{Name: "LAMEDUCK_CHECK_MAX_AGE", Value: "1h"}, {Name: "LAMEDUCK_NOT_READY_AT", Value: "signal"}},
		ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3, PeriodSeconds: math.MaxInt32, FailureThreshold: 2,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}}}
	// No readiness-max-age: the detection time is far above 1h. The
	// readiness-window finding is computed in 64 bits, not wrapped.
	if fs, _ := Check([]Object{pod(30, long)}, Options{}); len(fs) != 1 || fs[0].Rule != "readiness-window" ||
		negative.MatchString(fs[0].Message) || fs[0].Values["detect_seconds"] != float64(2*math.MaxInt32) {
		t.Errorf("periodSeconds 2147483647 × failureThreshold 2 against a 1h max age: %+v; want readiness-window alone, with (2 − 1) × 2147483647 + 2147483647 s", fs)
	}
	boot := corev1.Container{Env: []corev1.EnvVar{{Name: "LAMEDUCK_STARTUP_TIMEOUT", Value: "1h"}},
		StartupProbe: &corev1.Probe{PeriodSeconds: math.MaxInt32, FailureThreshold: math.MaxInt32,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/startupz"}}}}
	if fs, _ := Check([]Object{pod(30, boot)}, Options{}); len(fs) != 0 {
		t.Errorf("a startup probe of 2147483647² seconds against a 1h boot: %+v; want none", fs)
	}
	sleepy := corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sleep", "99999999999999999999"}}}}}
	fs, _ := Check([]Object{pod(30, sleepy)}, Options{})
	if len(fs) != 2 || fs[0].Rule != "grace-period" || !strings.Contains(fs[0].Message, "never returns") ||
		fs[1].Rule != "prestop-sleep" || negative.MatchString(fs[0].Message+fs[1].Message) {
		t.Errorf("sleep 99999999999999999999: %+v", fs)
	}
	// A sleep that fits a time.Duration, added to the window and the
	// teardown, saturates instead of wrapping to a negative sum that fits.
	centuries := corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sleep", "9223372030"}}}}}
	fs, _ = Check([]Object{pod(30, centuries)}, Options{})
	if len(fs) != 2 || fs[0].Rule != "grace-period" || negative.MatchString(fs[0].Message) {
		t.Errorf("sleep 106751d in a grace period of 10000000000s: %+v", fs)
	}
}

// The kubelet's worst case to see readiness flip: (failureThreshold − 1)
// × periodSeconds + max(periodSeconds, timeoutSeconds), with Kubernetes'
// defaults for unset fields.
func TestReadinessDetect(t *testing.T) {
	for _, c := range []struct {
		period, failures, timeout int32
		want                      time.Duration
	}{
		{0, 0, 0, 30 * time.Second}, // 10s × 3, timeout 1s
		{2, 2, 3, 5 * time.Second},  // the chart's: the probe in flight holds the next one back 1s
		{2, 2, 2, 4 * time.Second},
		{1, 2, 3, 4 * time.Second},
		{5, 1, 10, 10 * time.Second},
		{2, 1, 1, 2 * time.Second},
	} {
		p := &corev1.Probe{PeriodSeconds: c.period, FailureThreshold: c.failures, TimeoutSeconds: c.timeout}
		if got := readinessDetect(p); got != c.want {
			t.Errorf("period %d, failures %d, timeout %d: %s; want %s", c.period, c.failures, c.timeout, got, c.want)
		}
	}
}

// A container is judged by any sign of lameduck: a probe on one of its
// paths or gRPC services, or its preStop hook; a container with none is
// skipped with the reason, and --skip wins over every sign.
func TestJudgedBySigns(t *testing.T) {
	svc := func(s string) *string { return &s }
	pod := func(c corev1.Container) []Object {
		c.Name = "app"
		return []Object{{Kind: "Pod", Name: "p", Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}
	}
	for _, c := range []struct {
		c      corev1.Container
		judged bool
		sign   string
	}{
		{corev1.Container{}, false, ""},
		{corev1.Container{LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}}}}, false, ""},
		{corev1.Container{ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}}}, false, ""},
		{corev1.Container{StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/startupz"}}}}, true, "startupProbe is httpGet /startupz"},
		{corev1.Container{ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz/db"}}}}, true, "readinessProbe is httpGet /readyz/db"},
		{corev1.Container{LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000, Service: svc("liveness")}}}}, true, `gRPC health service "liveness"`},
		{corev1.Container{LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000}}}}, false, ""},
		{corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/prestop"}}}}, true, "preStop hook is httpGet /prestop"},
		{corev1.Container{Env: []corev1.EnvVar{{Name: "LAMEDUCK_ENV", Value: "kubernetes"}}}, true, "sets LAMEDUCK_ENV"},
	} {
		r := Run(pod(c.c), Options{})
		if c.judged != (r.Containers == 1) || c.judged && !strings.Contains(strings.Join(r.Judged[0].Signs, "; "), c.sign) ||
			!c.judged && (len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Reason, "nothing says it runs lameduck")) {
			t.Errorf("%+v: %+v; want judged %v by %q", c.c, r, c.judged, c.sign)
		}
		if r := Run(pod(c.c), Options{Skip: []string{"app"}, Containers: []string{"app"}}); r.Containers != 0 || r.Skipped[0].Reason != "named with --skip" {
			t.Errorf("--skip: %+v", r)
		}
	}
}

// The grace period is the pod's: a native sidecar stops after the regular
// containers, so the pod's sequence is the longest of them plus the
// sidecar's, even when each fits alone.
func TestPodGrace(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	ready := httpReadiness("/readyz")
	lameduckC := func(name, teardown string) corev1.Container {
		return corev1.Container{Name: name, ReadinessProbe: ready, Env: []corev1.EnvVar{
			{Name: "LAMEDUCK_SHUTDOWN_TEARDOWN", Value: teardown}, {Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}}}
	}
	grace := int64(30)
	pod := func(init []corev1.Container, main ...corev1.Container) []Object {
		return []Object{{Kind: "Pod", Name: "p", Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, InitContainers: init, Containers: main}}}
	}
	sidecar := lameduckC("proxy", "15s")
	sidecar.RestartPolicy = &always
	fs, n := Check(pod([]corev1.Container{sidecar}, lameduckC("app", "10s")), Options{})
	if n != 2 || len(fs) != 1 || fs[0].Rule != "pod-grace" || fs[0].Values["total_seconds"] != 35.0 ||
		!strings.Contains(fs[0].Message, `"app" 15s (the longest regular container) + sidecar "proxy" 20s = 35s > terminationGracePeriodSeconds 30`) {
		t.Errorf("app 15s then sidecar 20s in 30s: %d judged, %+v", n, fs)
	}
	// Two regular containers stop in parallel: 15s and 20s fit 30s.
	if fs, _ := Check(pod(nil, lameduckC("app", "10s"), lameduckC("other", "15s")), Options{}); len(fs) != 0 {
		t.Errorf("two regular containers: %+v; want none", fs)
	}
	// A regular container that is not lameduck counts with its preStop
	// sleep, the least it takes before the sidecar's turn.
	sleeper := corev1.Container{Name: "nginx", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sleep", "15"}}}}}
	fs, _ = Check(pod([]corev1.Container{sidecar}, sleeper), Options{})
	if len(fs) != 1 || fs[0].Rule != "pod-grace" || fs[0].Container != "proxy" || fs[0].Values["total_seconds"] != 35.0 {
		t.Errorf("nginx's sleep 15 then the sidecar's 20s: %+v", fs)
	}
	// A sidecar that does not fit alone is grace-period's, with no second
	// finding for the pod.
	long := lameduckC("proxy", "40s")
	long.RestartPolicy = &always
	if fs, _ := Check(pod([]corev1.Container{long}, corev1.Container{Name: "nginx"}), Options{}); len(fs) != 1 || fs[0].Rule != "grace-period" {
		t.Errorf("a sidecar alone, 45s in 30s: %+v; want grace-period alone", fs)
	}
	// An init container that runs to completion is not a sidecar.
	plain := lameduckC("migrate", "15s")
	if fs, n := Check(pod([]corev1.Container{plain}, lameduckC("app", "10s")), Options{}); n != 1 || len(fs) != 0 {
		t.Errorf("a plain init container: %d judged, %+v", n, fs)
	}
}

// The container rules are one function per rule id, in Rules order
// (objectRules run per object), and each reports its own id only: over every
// fixture, each rule's function reports at least once, and only findings
// of its id (readiness-max-age has no fixture file: maxAgePod).
func TestOneFuncPerRule(t *testing.T) {
	var ids []string
	for _, r := range Rules {
		if !slices.Contains(objectRules, r.ID) {
			ids = append(ids, r.ID)
		}
	}
	var table []string
	for _, r := range containerRules {
		table = append(table, r.id)
	}
	if !slices.Equal(table, ids) {
		t.Fatalf("containerRules %q; want Rules' ids but objectRules, in order: %q", table, ids)
	}
	paths, err := filepath.Glob("../../testdata/vet/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	objs, _, err := ReadInputs(paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, maxAgePod("5s"))
	reported := map[string]int{}
	for i := range objs {
		for _, k := range podContainers(&objs[i]) {
			j, _ := judge(&objs[i], k, Options{})
			if j == nil {
				continue
			}
			for _, r := range containerRules {
				for _, f := range r.check(j) {
					if f.Rule != r.id {
						t.Errorf("the function of %s reported %s: %s", r.id, f.Rule, f.Message)
					}
					reported[r.id]++
				}
			}
		}
	}
	for _, id := range ids {
		if reported[id] == 0 {
			t.Errorf("no fixture makes %s report", id)
		}
	}
}

// appPod returns a pod "p" with terminationGracePeriodSeconds grace and
// one container, c, named "app".
func appPod(grace int64, c corev1.Container) Object {
	c.Name = "app"
	return Object{Kind: "Pod", Name: "p", Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{c}}}
}

// httpReadiness returns a readiness probe that asks httpGet path every 2s
// with a 3s timeout and fails after 2 failures.
func httpReadiness(path string) *corev1.Probe {
	return &corev1.Probe{TimeoutSeconds: 3, PeriodSeconds: 2, FailureThreshold: 2,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path}}}
}

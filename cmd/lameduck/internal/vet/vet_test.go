package vet

import (
	"strings"
	"testing"
	"time"

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
	for _, c := range []struct {
		c     corev1.Container
		want  time.Duration
		sleep bool
	}{
		{corev1.Container{}, 0, false},
		{hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}), 5 * time.Second, true},
		{hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "echo bye; sleep 2.5"}}}), 2500 * time.Millisecond, true},
		{hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sleep", "7"}}}), 7 * time.Second, true},
		{hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"nginx", "-s", "quit"}}}), 0, false},
		{hook(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 4}}), 4 * time.Second, false},
		{hook(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/prestop"}}), 0, false},
	} {
		d, sleep, _ := preStopTime(c.c)
		if d != c.want || sleep != c.sleep {
			t.Errorf("%+v: %s, exec sleep %v; want %s, %v", c.c.Lifecycle, d, sleep, c.want, c.sleep)
		}
	}
}

// TestGraceUsesTheBinarysDefaults: with no LAMEDUCK_SHUTDOWN_TEARDOWN the
// teardown is the one the binary derives in a pod (grace − window −
// margin), so Kubernetes' default 30s fits the default window.
func TestGraceUsesTheBinarysDefaults(t *testing.T) {
	grace := int64(30)
	o := Object{Kind: "Pod", Name: "p", Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
		Name: "app",
		Env:  []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}},
		ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}},
	}}}}
	if fs, n := Check([]Object{o}, Options{}); n != 1 || len(fs) != 0 {
		t.Fatalf("checked %d, findings %+v; want one clean container", n, fs)
	}
	o.Spec.Containers[0].Env = append(o.Spec.Containers[0].Env, corev1.EnvVar{Name: "LAMEDUCK_SHUTDOWN_TEARDOWN", Value: "30s"})
	fs, _ := Check([]Object{o}, Options{})
	if len(fs) != 1 || fs[0].Rule != "grace-period" || !strings.Contains(fs[0].Message, "delay 5s + teardown 30s = 35s > terminationGracePeriodSeconds 30") {
		t.Fatalf("findings %+v; want grace-period with the sum", fs)
	}
}

// The preStop token: a hook on the application's port without one is the
// binary's startup error; a token from a mounted file, which vet cannot
// read, counts as a token.
func TestPreStopTokenRule(t *testing.T) {
	pod := func(env ...corev1.EnvVar) Object {
		grace := int64(30)
		return Object{Kind: "Pod", Name: "p", Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
			Name: "app",
			Env:  append([]corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}}, env...),
			ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3,
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}},
		}}}}
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
		return Object{Kind: "Pod", Name: "p", Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
			Name: "app",
			Env: []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"},
				{Name: "LAMEDUCK_READINESS_PATH", Value: "/-/readyz"}, {Name: "LAMEDUCK_LIVENESS_PATHS", Value: "/-/healthz"}},
			ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3,
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: readiness}}},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: liveness}}},
		}}}}
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
	grace := int64(60)
	pod := func(maxAge string) Object {
		return Object{Kind: "Pod", Name: "p", Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
			Name: "app",
			Env:  []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "60s"}, {Name: "LAMEDUCK_CHECK_MAX_AGE", Value: maxAge}},
			ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3, PeriodSeconds: 2, FailureThreshold: 2,
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}},
		}}}}
	}
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

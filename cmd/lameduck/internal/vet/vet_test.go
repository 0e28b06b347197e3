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

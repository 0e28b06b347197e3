package kube_test

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	loadRate = 200 // requests a second, open loop
	rounds   = 3   // rolling restarts per scenario
)

// rollUnderLoad sends load through url, restarts deployment name rounds
// times (each round waits until the old pods have drained and exited), and
// returns the load's count.
func (e *env) rollUnderLoad(name, url string, rounds int) loadResult {
	e.t.Helper()
	l := startLoad(url, loadRate)
	time.Sleep(2 * time.Second) // load before the first restart
	for i := range rounds {
		start := time.Now()
		e.restart(name)
		e.waitRolledOut(name, 4*time.Minute)
		e.t.Logf("round %d: rolled out, old pods gone, in %.1fs", i+1, time.Since(start).Seconds())
	}
	time.Sleep(2 * time.Second) // load after the last old pod left
	return l.finish()
}

// TestRollingRestartsThroughKubeProxy is the proof the project exists for:
// rolling restarts of the chart's demo under open-loop load through the
// Service's ClusterIP, routed by the real kube-proxy from the real
// EndpointSlices, with the real kubelet's probes and SIGTERM, lose no
// request and make no client re-send one. The naive server in the same run
// (no signal handling: it exits at SIGTERM) loses requests, which shows
// the test can see what it claims to rule out. Counts are asserted, never
// exact numbers of the control, which vary from run to run.
func TestRollingRestartsThroughKubeProxy(t *testing.T) {
	t.Cleanup(func() {
		if n, mean, p95, err := kubeProxyProgramming(t); err == nil {
			t.Logf("kube-proxy programmed %d endpoint changes, %.2fs after each on average, 95%% within %.1fs", n, mean, p95)
		}
	})
	t.Run("naive server, the control", func(t *testing.T) {
		e := newEnv(t, "naive")
		e.deployNaive("naive")
		url := e.serviceURL("naive")
		pods := e.watchPods("naive")
		r := e.rollUnderLoad("naive", url, rounds)
		t.Logf("naive: %s; examples: %q", r, r.Examples)
		if r.Failed == 0 {
			t.Errorf("the naive server lost no request in %d rolling restarts (%s): the test cannot see a bad drain", rounds, r)
		}
		logLives(t, pods.lives())
	})
	for _, tc := range []struct {
		name   string
		values map[string]any
		// the longest SIGTERM-to-exit allowed: the idle mode must end its
		// window once traffic stops, well before its 30s bound
		maxExit time.Duration
	}{
		{"demo, fixed window", nil, 0},
		{"demo, idle drain", map[string]any{"shutdown": map[string]any{"drainMode": "idle", "idleWindowSeconds": 3, "drainTimeoutSeconds": 30}}, 20 * time.Second},
		{"demo on Fiber", map[string]any{"extraArgs": []any{"--server", "fiber"}}, 0},
		// The preStop httpGet starts the drain and returns when the 5s
		// window has passed; SIGTERM then goes straight to the teardown:
		// one window, so the pod is gone well before two would end (10s).
		{"demo, preStop httpGet", map[string]any{"preStop": map[string]any{"mode": "http", "http": map[string]any{"token": "e2e-prestop-token"}}}, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "demo")
			e.helmInstall("lameduck-demo", tc.values)
			url := e.serviceURL("lameduck-demo")
			pods := e.watchPods("demo")
			r := e.rollUnderLoad("lameduck-demo", url, rounds)
			t.Logf("%s: %s", tc.name, r)
			if r.Failed != 0 || r.Resent != 0 {
				t.Errorf("%s: %d requests failed and %d were re-sent across %d rolling restarts, want 0 and 0; examples: %q",
					tc.name, r.Failed, r.Resent, rounds, r.Examples)
			}
			if r.Total < loadRate*10 {
				t.Errorf("only %d requests sent: the load did not run", r.Total)
			}
			lives := pods.lives()
			logLives(t, lives)
			checkExits(t, lives, 3*rounds, tc.maxExit)
		})
	}
}

// checkExits asserts that want pods were stopped, each exiting by itself
// with status 0 before its grace period (never SIGKILLed), and within
// maxExit of SIGTERM when maxExit is set.
func checkExits(t *testing.T, lives []podLife, want int, maxExit time.Duration) {
	t.Helper()
	stopped := 0
	for _, l := range lives {
		if l.Deleted.IsZero() {
			if l.Restarts != 0 {
				t.Errorf("pod %s restarted %d times (liveness?)", l.Name, l.Restarts)
			}
			continue
		}
		stopped++
		if l.Exited.IsZero() {
			t.Errorf("pod %s: deleted, but its exit was not seen", l.Name)
			continue
		}
		took := l.Exited.Sub(l.Deleted)
		if l.ExitCode != 0 {
			t.Errorf("pod %s exited %d (%s) %.1fs after SIGTERM (grace %ds), want 0 before the grace", l.Name, l.ExitCode, l.Reason, took.Seconds(), l.Grace)
		}
		// finishedAt has whole-second resolution
		if maxExit > 0 && took > maxExit+time.Second {
			t.Errorf("pod %s exited %.0fs after SIGTERM, want at most %s", l.Name, took.Seconds(), maxExit)
		}
	}
	if stopped < want {
		t.Errorf("%d pods stopped, want at least %d", stopped, want)
	}
}

func logLives(t *testing.T, lives []podLife) {
	t.Helper()
	for _, l := range lives {
		if l.Deleted.IsZero() {
			continue
		}
		t.Logf("pod %s: SIGTERM %s, exit %d (%s) %.0fs later, grace %ds", l.Name, l.Deleted.Format("15:04:05"), l.ExitCode, l.Reason,
			l.Exited.Sub(l.Deleted).Seconds(), l.Grace)
	}
}

// deployNaive makes a Deployment and Service of the naive server, shaped
// as the chart's (3 replicas, one surge, none unavailable, readiness every
// 2s), so only the server differs.
func (e *env) deployNaive(name string) {
	e.t.Helper()
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	e.deployNaiveAs(name, naiveShape{Replicas: 3, Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}}})
}

// naiveShape is how a control Deployment differs from the chart's shape.
type naiveShape struct {
	Replicas int32
	Strategy appsv1.DeploymentStrategy
	// PreStopSleep, when positive, is a native preStop sleep action
	// (lifecycle.preStop.sleep, Kubernetes ≥ 1.30) of that many seconds:
	// what users add to a server that handles no signal.
	PreStopSleep int64
}

// deployNaiveAs makes a Deployment and Service of the naive server shaped
// by s, readiness every 2s as the chart's.
func (e *env) deployNaiveAs(name string, s naiveShape) {
	e.t.Helper()
	labels := map[string]string{"app": name}
	replicas, grace := s.Replicas, int64(30)
	var lifecycle *corev1.Lifecycle
	if s.PreStopSleep > 0 {
		lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s.PreStopSleep}}}
	}
	probe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds: period, FailureThreshold: 2, TimeoutSeconds: 3}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: s.Strategy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					EnableServiceLinks:            new(bool),
					Containers: []corev1.Container{{
						Name: name, Image: naiveImage.Name, ImagePullPolicy: corev1.PullNever,
						Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: probe("/readyz", 2),
						LivenessProbe:  probe("/healthz", 10),
						Lifecycle:      lifecycle,
					}},
				},
			},
		},
	}
	ctx := e.t.Context()
	if _, err := e.cs.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: labels,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	if _, err := e.cs.CoreV1().Services(e.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitRolledOut(name, 3*time.Minute)
}

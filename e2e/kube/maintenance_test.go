package kube_test

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMaintenanceSwitchOnTheCluster: the chart with LAMEDUCK_MAINTENANCE
// and the /prestop token. POST /maintenance/on with the token takes the pod
// out of its Service's EndpointSlice (ready false, not terminating) through
// the kubelet's own readiness probe, /maintenance/off brings it back; the
// call without the token is refused (401) and changes nothing; /healthz
// answers 200 throughout and the container never restarts
// (docs/probes-and-shutdown.md, "The maintenance switch").
func TestMaintenanceSwitchOnTheCluster(t *testing.T) {
	e := newEnv(t, "maint")
	const token = "e2e-maintenance-token-0123456789"
	e.helmInstall("maint", map[string]any{
		"replicaCount": 2,
		"preStop":      map[string]any{"mode": "http", "http": map[string]any{"token": token}},
		"extraEnv":     []any{map[string]any{"name": "LAMEDUCK_MAINTENANCE", "value": "true"}},
	})
	ctx := t.Context()
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=maint"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("pods: %v, %d", err, len(pods.Items))
	}
	pod := pods.Items[0]
	base := fmt.Sprintf("http://%s:8080", pod.Status.PodIP)
	c := &http.Client{Timeout: 2 * time.Second}
	post := func(path, tok string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, nil)
		if tok != "" {
			req.Header.Set("X-Lameduck-Token", tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// endpoint returns the pod's endpoint in the Service's EndpointSlices.
	endpoint := func() (*discoveryv1.Endpoint, error) {
		l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=maint-lameduck-demo"})
		if err != nil {
			return nil, err
		}
		for _, s := range l.Items {
			for i, ep := range s.Endpoints {
				if ep.TargetRef != nil && ep.TargetRef.UID == pod.UID {
					return &s.Endpoints[i], nil
				}
			}
		}
		return nil, fmt.Errorf("pod %s is in no EndpointSlice", pod.Name)
	}
	isReady := func(want bool) func() error {
		return func() error {
			ep, err := endpoint()
			if err != nil {
				return err
			}
			ready := ep.Conditions.Ready != nil && *ep.Conditions.Ready
			terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			if ready != want || terminating {
				return fmt.Errorf("endpoint ready %v terminating %v; want ready %v", ready, terminating, want)
			}
			return nil
		}
	}
	waitUntil(t, time.Minute, "the pod's endpoint ready", isReady(true))

	// /healthz, every 200ms, from here to the end.
	var healthzBad, healthzOK atomic.Int64
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			resp, err := c.Get(base + "/healthz")
			if err != nil {
				healthzBad.Add(1)
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				healthzBad.Add(1)
			} else {
				healthzOK.Add(1)
			}
		}
	}()
	defer func() { close(stop); <-polled }()

	if code := post("/maintenance/on", ""); code != 401 {
		t.Fatalf("POST /maintenance/on without the token: %d; want 401", code)
	}
	if code := post("/maintenance/on", "wrong-token"); code != 401 {
		t.Fatalf("POST /maintenance/on with a wrong token: %d; want 401", code)
	}
	time.Sleep(3 * time.Second) // more than the readiness probe's 2s period: a refused call changed nothing
	waitUntil(t, time.Second, "the endpoint still ready after the refused calls", isReady(true))

	start := time.Now()
	if code := post("/maintenance/on", token); code != 200 {
		t.Fatalf("POST /maintenance/on: %d; want 200", code)
	}
	waitUntil(t, time.Minute, "the endpoint not ready (maintenance on)", isReady(false))
	out := time.Since(start)
	start = time.Now()
	if code := post("/maintenance/off", token); code != 200 {
		t.Fatalf("POST /maintenance/off: %d; want 200", code)
	}
	waitUntil(t, time.Minute, "the endpoint ready again (maintenance off)", isReady(true))
	back := time.Since(start)
	t.Logf("maintenance on: out of the EndpointSlice after %.1fs; off: back after %.1fs; /healthz %d × 200, %d other",
		out.Seconds(), back.Seconds(), healthzOK.Load(), healthzBad.Load())
	if n := healthzBad.Load(); n != 0 {
		t.Errorf("/healthz answered other than 200 (or failed) %d times", n)
	}
	p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("pod %s after the switch: deleted %v, phase %s, statuses %+v; want running, never restarted", p.Name, p.DeletionTimestamp, p.Status.Phase, p.Status.ContainerStatuses)
	}
}

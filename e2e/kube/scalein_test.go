package kube_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestScaleInKeepsTheBusyRunner: three runners of the chart with
// worker.deletionCost (demo-worker --deletion-cost, contrib/kube), one job
// of 10 minutes: the runner that takes it sets its pod's
// controller.kubernetes.io/pod-deletion-cost, and `kubectl scale` to one
// replica deletes the two idle runners, never the busy one
// (docs/runners.md, "Scale-in removes idle runners first").
func TestScaleInKeepsTheBusyRunner(t *testing.T) {
	needCluster(t)
	bin := lameduckBin(t)
	e := newEnv(t, "scalein")
	natsURL := e.startNATS()
	name := fmt.Sprintf("scalein_%d", time.Now().UnixNano()%1e9)
	e.helmInstall("lameduck-demo", map[string]any{"replicaCount": 1, "worker": map[string]any{
		"enabled": true, "replicaCount": 3, "queue": "nats", "nats": natsURL, "name": name, "deletionCost": true,
		// the test's cleanup waits for the busy runner's drain: keep it short
		"drainTimeoutSeconds": 20, "checkpointMarginSeconds": 10}})
	enqueueJobs(t, bin, []string{"--nats", natsURL, "--name", name}, 1, 10*time.Minute)

	const annotation = "controller.kubernetes.io/pod-deletion-cost"
	workers := func() []corev1.Pod {
		l, err := e.cs.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=worker"})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	var busy corev1.Pod
	start := time.Now()
	waitUntil(t, 2*time.Minute, "one runner's pod marked busy", func() error {
		var marked []corev1.Pod
		for _, p := range workers() {
			if p.Annotations[annotation] != "" {
				marked = append(marked, p)
			}
		}
		if len(marked) != 1 {
			return fmt.Errorf("%d pods carry %s", len(marked), annotation)
		}
		busy = marked[0]
		return nil
	})
	t.Logf("runner %s took the job: %s=%s after %.1fs", busy.Name, annotation, busy.Annotations[annotation], time.Since(start).Seconds())

	e.kubectl(nil, "scale", "deployment", "lameduck-demo-worker", "--replicas=1")
	start = time.Now()
	waitUntil(t, 2*time.Minute, "one runner left, not being deleted", func() error {
		var live, deleting []string
		for _, p := range workers() {
			if p.DeletionTimestamp != nil {
				deleting = append(deleting, p.Name)
			} else {
				live = append(live, p.Name)
			}
		}
		if len(live) != 1 || len(deleting) != 0 {
			return fmt.Errorf("live %v, being deleted %v", live, deleting)
		}
		if live[0] != busy.Name {
			t.Fatalf("scale-in kept %s and deleted the busy runner %s", live[0], busy.Name)
		}
		return nil
	})
	p, err := e.cs.CoreV1().Pods(e.ns).Get(t.Context(), busy.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Annotations[annotation] == "" || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the busy runner after the scale-in: annotation %q, statuses %+v; want still busy, never restarted", p.Annotations[annotation], p.Status.ContainerStatuses)
	}
	t.Logf("scale 3 → 1: the two idle runners gone %.1fs after kubectl scale; busy %s kept, still marked", time.Since(start).Seconds(), busy.Name)
}

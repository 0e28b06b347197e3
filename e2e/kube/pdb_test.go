package kube_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPDBEvictsNotReadyPods is the chart's PodDisruptionBudget on the real
// disruption controller and Eviction API (what `kubectl drain` calls): two
// replicas made not Ready by a failing critical check. With the chart's
// unhealthyPodEvictionPolicy: AlwaysAllow both evictions are accepted at
// once and each pod is gone within its grace period; the same budget
// patched back to the default (IfHealthyBudget) refuses them, 429, so a
// drain would wait for ever (docs/deploying.md, "Node drains and not-Ready
// pods").
func TestPDBEvictsNotReadyPods(t *testing.T) {
	e := newEnv(t, "pdb")
	const release = "pdb"
	ac := new(action.Configuration)
	if err := ac.Init(kube.GetConfig(cfg.Kubeconfig(), "", e.ns), e.ns, "secret", func(format string, v ...any) {
		t.Logf("helm: "+format, v...)
	}); err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(filepath.Join(repo, "deploy", "helm", "lameduck-demo"))
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(ac)
	in.ReleaseName, in.Namespace = release, e.ns // no Wait: the pods never become Ready
	if _, err := in.RunWithContext(t.Context(), ch, map[string]any{
		"replicaCount": 2,
		"extraArgs":    []any{"--check", "dep=fail,critical"},
	}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	ctx := t.Context()
	pdbs := e.cs.PolicyV1().PodDisruptionBudgets(e.ns)
	pdb, err := pdbs.Get(ctx, "pdb-lameduck-demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
		t.Fatalf("the chart's budget has unhealthyPodEvictionPolicy %v; want AlwaysAllow", p)
	}
	// Two pods running, not Ready (the critical check fails), and the
	// disruption controller has counted them: no healthy pod, one wanted.
	var pods []corev1.Pod
	waitUntil(t, 3*time.Minute, "two running, not-Ready pods counted by the budget", func() error {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		if err != nil {
			return err
		}
		pods = pods[:0]
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && !podReady(&p) && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		pdb, err := pdbs.Get(ctx, "pdb-lameduck-demo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := pdb.Status
		if len(pods) != 2 || s.ObservedGeneration != pdb.Generation || s.ExpectedPods != 2 || s.CurrentHealthy != 0 || s.DesiredHealthy != 1 {
			return fmt.Errorf("%d running not-Ready pods; budget expected %d, healthy %d, desired %d", len(pods), s.ExpectedPods, s.CurrentHealthy, s.DesiredHealthy)
		}
		return nil
	})
	evict := func(p corev1.Pod) error {
		return e.cs.PolicyV1().Evictions(e.ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: e.ns}})
	}

	// The default policy: every eviction refused, as long as no pod is Ready.
	if _, err := pdbs.Patch(ctx, pdb.Name, types.MergePatchType, []byte(`{"spec":{"unhealthyPodEvictionPolicy":"IfHealthyBudget"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "IfHealthyBudget refuses the eviction of a not-Ready pod", func() error {
		err := evict(pods[0])
		if err == nil {
			t.Fatalf("IfHealthyBudget: the eviction of not-Ready %s was accepted", pods[0].Name)
		}
		if !apierrors.IsTooManyRequests(err) {
			return fmt.Errorf("eviction: %v; want 429", err)
		}
		t.Logf("IfHealthyBudget: eviction of not-Ready %s refused: %v", pods[0].Name, err)
		return nil
	})

	// The chart's policy: both accepted, and both pods gone within their grace.
	if _, err := pdbs.Patch(ctx, pdb.Name, types.MergePatchType, []byte(`{"spec":{"unhealthyPodEvictionPolicy":"AlwaysAllow"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, p := range pods {
		waitUntil(t, 30*time.Second, "AlwaysAllow accepts the eviction of "+p.Name, func() error { return evict(p) })
	}
	accepted := time.Since(start)
	grace := time.Duration(*pods[0].Spec.TerminationGracePeriodSeconds) * time.Second
	for _, p := range pods {
		// The kubelet SIGKILLs at the grace period: a pod still there well
		// after it was not evicted at all.
		waitUntil(t, grace+30*time.Second, "evicted pod "+p.Name+" gone", func() error {
			got, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, p.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return err
			case got.UID != p.UID:
				return nil
			}
			return fmt.Errorf("still there, phase %s", got.Status.Phase)
		})
	}
	t.Logf("AlwaysAllow: both evictions accepted in %.1fs, both pods gone %.1fs after the first eviction (grace %s)",
		accepted.Seconds(), time.Since(start).Seconds(), grace)
}

package kube_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPlainManifestsRunAsShipped applies deploy/k8s/ as a user would
// (`kubectl apply -f deploy/k8s/`) and waits for every pod to be Ready
// through the kubelet's startup, readiness and liveness probes. Then it
// turns the kubelet's service links back on (enableServiceLinks: true, the
// Kubernetes default): the Service lameduck-demo puts LAMEDUCK_DEMO_SERVICE_HOST and the like
// variables into each pod, which lameduck must tell from a misspelt
// setting. Before that rule, every pod crash-looped here.
func TestPlainManifestsRunAsShipped(t *testing.T) {
	e := newEnv(t, "manifests")
	e.kubectl(nil, "apply", "-f", filepath.Join(repo, "deploy", "k8s"))
	e.waitRolledOut("lameduck-demo", 3*time.Minute)
	e.serviceURL("lameduck-demo")

	e.kubectl(nil, "patch", "deployment", "lameduck-demo", "--type=merge", "-p", `{"spec":{"template":{"spec":{"enableServiceLinks":true}}}}`)
	e.waitRolledOut("lameduck-demo", 3*time.Minute)
	pods, err := e.cs.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=lameduck-demo"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.EnableServiceLinks == nil || !*p.Spec.EnableServiceLinks {
			t.Fatalf("pod %s has no service links: the patch did not roll out", p.Name)
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount != 0 {
				t.Errorf("pod %s: container %s restarted %d times with service links on", p.Name, s.Name, s.RestartCount)
			}
		}
	}
}

// TestGraceArithmeticOnTheKubelet: a Deployment whose grace period (4s) is
// shorter than its lame-duck window (10s) is SIGKILLed by the real kubelet
// at the grace period (exit 137), and `lameduck vet` flags that same
// manifest; the chart, which derives the grace from the same window,
// gives a pod that exits by itself, status 0, before its grace.
func TestGraceArithmeticOnTheKubelet(t *testing.T) {
	needCluster(t)
	manifest := filepath.Join("testdata", "short-grace.yaml")
	t.Run("lameduck vet flags it", func(t *testing.T) {
		bin := lameduckBin(t)
		out, err := exec.Command(bin, "vet", manifest).CombinedOutput()
		if code := exitCode(err); code != 1 || !strings.Contains(string(out), "terminationGracePeriodSeconds") {
			t.Fatalf("lameduck vet %s: exit %d, want 1 with a grace finding:\n%s", manifest, code, out)
		}
		t.Logf("lameduck vet: %s", strings.TrimSpace(string(out)))
	})
	t.Run("the kubelet kills it at the grace period", func(t *testing.T) {
		e := newEnv(t, "short-grace")
		body, err := os.ReadFile(manifest)
		if err != nil {
			t.Fatal(err)
		}
		e.kubectl(body, "apply", "-f", "-")
		e.waitRolledOut("short-grace", 3*time.Minute)
		pods := e.watchPods("demo")
		e.kubectl(nil, "delete", "pod", "-l", "app=short-grace", "--wait=false")
		var l podLife
		waitUntil(t, time.Minute, "the pod's exit", func() error {
			for _, l = range pods.lives() {
				if !l.Exited.IsZero() {
					return nil
				}
			}
			return os.ErrNotExist
		})
		took := l.Exited.Sub(l.Deleted)
		t.Logf("short grace: SIGTERM, then exit %d (%s) %.0fs later, grace %ds", l.ExitCode, l.Reason, took.Seconds(), l.Grace)
		if l.ExitCode != 137 {
			t.Errorf("exit code %d (%s) %.0fs after SIGTERM, want 137: SIGKILL at the 4s grace, inside the 10s window", l.ExitCode, l.Reason, took.Seconds())
		}
		// finishedAt has whole seconds, and the kubelet's kill lands a little
		// after the grace; the exit code is the proof, this only rules out
		// an exit at the window's end
		if took >= 10*time.Second {
			t.Errorf("exited %.0fs after SIGTERM, at the window's end: the kubelet should have killed it at 4s", took.Seconds())
		}
	})
	t.Run("the chart's derived grace lets it exit by itself", func(t *testing.T) {
		e := newEnv(t, "derived-grace")
		e.helmInstall("lameduck-demo", map[string]any{"replicaCount": 1, "shutdown": map[string]any{"delaySeconds": 10}})
		d := e.deployment("lameduck-demo")
		grace := *d.Spec.Template.Spec.TerminationGracePeriodSeconds
		pods := e.watchPods("demo")
		e.kubectl(nil, "delete", "pod", "-l", "app.kubernetes.io/name=lameduck-demo", "--wait=false")
		var l podLife
		waitUntil(t, 2*time.Minute, "the pod's exit", func() error {
			for _, l = range pods.lives() {
				if !l.Exited.IsZero() {
					return nil
				}
			}
			return os.ErrNotExist
		})
		took := l.Exited.Sub(l.Deleted)
		t.Logf("derived grace %ds: exit %d (%s) %.0fs after SIGTERM", grace, l.ExitCode, l.Reason, took.Seconds())
		if l.ExitCode != 0 || took >= time.Duration(grace)*time.Second {
			t.Errorf("exit %d (%s) %.0fs after SIGTERM with grace %ds, want 0 before the grace", l.ExitCode, l.Reason, took.Seconds(), grace)
		}
		if took < 9*time.Second {
			t.Errorf("exited %.0fs after SIGTERM, before the 10s window ended", took.Seconds())
		}
	})
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

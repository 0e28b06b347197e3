package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// env is one test's view of the cluster: a namespace of its own, deleted
// (with its pods' grace) when the test ends.
type env struct {
	t  testing.TB
	cs *kubernetes.Clientset
	ns string
}

func newEnv(t testing.TB, name string) *env {
	t.Helper()
	needCluster(t)
	cs, err := cfg.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1e6)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// the namespace's default ServiceAccount comes from the controller-manager
	waitUntil(t, time.Minute, "the namespace's default ServiceAccount", func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	e := &env{t: t, cs: cs, ns: ns}
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpState()
		}
		// The namespace goes, and the test waits for its pods (each gets
		// its grace and drains as in a rollout), not for the namespace
		// object: the namespace controller re-checks a namespace whose pods
		// are still terminating with a growing back-off, which took up to
		// two minutes a namespace. `kubecluster down` waits for what is left.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		for ctx.Err() == nil {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil || len(pods.Items) == 0 {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	return e
}

// waitUntil polls f every 250ms until it returns nil, failing the test
// with f's last error after limit.
func waitUntil(t testing.TB, limit time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, limit, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// helmInstall installs the chart in deploy/helm/lameduck-demo with Helm's
// SDK (an install, not a template) and waits, as `helm install --wait`
// does, for every pod to be Ready through the kubelet's own probes.
func (e *env) helmInstall(release string, values map[string]any) {
	e.t.Helper()
	ac := new(action.Configuration)
	if err := ac.Init(kube.GetConfig(cfg.Kubeconfig(), "", e.ns), e.ns, "secret", func(format string, v ...any) {
		e.t.Logf("helm: "+format, v...)
	}); err != nil {
		e.t.Fatal(err)
	}
	ch, err := loader.Load(filepath.Join(repo, "deploy", "helm", "lameduck-demo"))
	if err != nil {
		e.t.Fatal(err)
	}
	in := action.NewInstall(ac)
	in.ReleaseName, in.Namespace = release, e.ns
	in.Wait, in.Timeout = true, 3*time.Minute
	start := time.Now()
	if _, err := in.RunWithContext(e.t.Context(), ch, values); err != nil {
		e.t.Fatalf("helm install %s: %v", release, err)
	}
	e.t.Logf("helm install %s: every pod Ready after %.1fs", release, time.Since(start).Seconds())
}

// kubectl runs the cluster's kubectl in the test's namespace.
func (e *env) kubectl(stdin []byte, args ...string) string {
	e.t.Helper()
	cmd := exec.CommandContext(e.t.Context(), filepath.Join(cfg.Bin(), "kubectl"), append([]string{"--kubeconfig", cfg.Kubeconfig(), "-n", e.ns}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitRolledOut waits until the Deployment's rollout is complete and every
// pod of an older revision is gone (its drain ended): the pods matching the
// Deployment's selector are exactly the desired replicas, all Ready, none
// being deleted.
func (e *env) waitRolledOut(name string, limit time.Duration) {
	e.t.Helper()
	ctx := e.t.Context()
	waitUntil(e.t, limit, "rollout of deployment/"+name, func() error {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := *d.Spec.Replicas
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want {
			return fmt.Errorf("generation %d observed %d, updated %d, available %d of %d", d.Generation, d.Status.ObservedGeneration,
				d.Status.UpdatedReplicas, d.Status.AvailableReplicas, want)
		}
		sel := metav1.FormatLabelSelector(d.Spec.Selector)
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if int32(len(pods.Items)) != want {
			return fmt.Errorf("%d pods, want %d (old ones still draining)", len(pods.Items), want)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !podReady(&p) {
				return fmt.Errorf("pod %s not Ready or being deleted", p.Name)
			}
		}
		return nil
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// restart restarts the Deployment as `kubectl rollout restart` does: a new
// kubectl.kubernetes.io/restartedAt annotation on the pod template.
func (e *env) restart(name string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339Nano))
	if _, err := e.cs.AppsV1().Deployments(e.ns).Patch(e.t.Context(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// restartRounds restarts the Deployment rounds times, each round waiting
// until the old pods have drained and exited, and logs each round's length.
func (e *env) restartRounds(name string, rounds int) {
	e.t.Helper()
	for i := range rounds {
		start := time.Now()
		e.restart(name)
		e.waitRolledOut(name, 4*time.Minute)
		e.t.Logf("round %d: rolled out, old pods gone, in %.1fs", i+1, time.Since(start).Seconds())
	}
}

// applyTestdata applies testdata/file in the namespace and waits until
// deployment, which the file holds, has rolled out, for at most limit.
func (e *env) applyTestdata(file, deployment string, limit time.Duration) {
	e.t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		e.t.Fatal(err)
	}
	e.kubectl(body, "apply", "-f", "-")
	e.waitRolledOut(deployment, limit)
}

// serviceURL is http://<ClusterIP>:<port> of a Service, once kube-proxy
// routes it: right after the pods are Ready kube-proxy still REJECTs the
// Service as endpoint-less until its next sync (about a second).
func (e *env) serviceURL(name string) string {
	e.t.Helper()
	svc, err := e.cs.CoreV1().Services(e.ns).Get(e.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	c := &http.Client{Timeout: 2 * time.Second}
	waitUntil(e.t, time.Minute, "kube-proxy routing "+url, func() error {
		resp, err := c.Get(url + "/")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("GET %s/: %s", url, resp.Status)
		}
		return nil
	})
	// Connections of an earlier scenario to this IP left in conntrack
	// (SYN_SENT to a pod that is gone) would catch a reused source port.
	exec.Command("conntrack", "-D", "-p", "tcp", "--orig-dst", svc.Spec.ClusterIP).Run()
	return url
}

// podLife is what the API said of one pod during a test.
type podLife struct {
	Name      string
	Deleted   time.Time // deletionTimestamp: the kubelet sends SIGTERM now (after any preStop hook)
	Grace     int64     // deletionGracePeriodSeconds
	Exited    time.Time // the app container's state.terminated.finishedAt
	ExitCode  int32
	Reason    string
	Restarts  int32
	Container string
	IP        string // status.podIP, the address kube-proxy's rules send to
}

// podWatch records every pod of the namespace from the API's watch.
type podWatch struct {
	mu   sync.Mutex
	pods map[string]*podLife
	stop context.CancelFunc
	done chan struct{}
}

func (e *env) watchPods(container string) *podWatch {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	pw := &podWatch{pods: map[string]*podLife{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(pw.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Error {
				continue
			}
			pw.mu.Lock()
			l := pw.pods[p.Name]
			if l == nil {
				l = &podLife{Name: p.Name, Container: container}
				pw.pods[p.Name] = l
			}
			if p.Status.PodIP != "" {
				l.IP = p.Status.PodIP
			}
			if p.DeletionTimestamp != nil && l.Deleted.IsZero() {
				l.Deleted = p.DeletionTimestamp.Time
				if p.DeletionGracePeriodSeconds != nil {
					l.Grace = *p.DeletionGracePeriodSeconds
				}
				// deletionTimestamp is the end of the grace period: SIGTERM went out Grace seconds before
				l.Deleted = l.Deleted.Add(-time.Duration(l.Grace) * time.Second)
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name != container {
					continue
				}
				l.Restarts = max(l.Restarts, cs.RestartCount)
				if term := cs.State.Terminated; term != nil && l.Exited.IsZero() {
					l.Exited, l.ExitCode, l.Reason = term.FinishedAt.Time, term.ExitCode, term.Reason
				}
			}
			pw.mu.Unlock()
		}
	}()
	e.t.Cleanup(pw.close)
	return pw
}

func (pw *podWatch) close() { pw.stop(); <-pw.done }

// lives is every pod seen, by name.
func (pw *podWatch) lives() []podLife {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var out []podLife
	for _, l := range pw.pods {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b podLife) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// dumpState logs what a failed test needs: the namespace's pods and
// events, and the component logs' location.
func (e *env) dumpState() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			e.t.Logf("pod %s: phase %s ready %v deleting %v", p.Name, p.Status.Phase, podReady(&p), p.DeletionTimestamp != nil)
		}
	}
	if evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range evs.Items {
			e.t.Logf("event %s %s/%s %s: %s", ev.LastTimestamp.Format("15:04:05"), ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
	for _, c := range []string{"kubelet", "kube-proxy", "containerd"} {
		if b, err := os.ReadFile(filepath.Join(cfg.Logs(), c+".log")); err == nil {
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			e.t.Logf("the last lines of %s's log:\n%s", c, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	}
	e.t.Logf("component logs: %s", cfg.Logs())
	if dir := os.Getenv("LDTEST_KUBE_KEEP_LOGS"); dir != "" {
		exec.Command("cp", "-r", cfg.Logs(), filepath.Join(dir, e.ns)).Run()
	}
}

// deployment reads a Deployment.
func (e *env) deployment(name string) *appsv1.Deployment {
	e.t.Helper()
	d, err := e.cs.AppsV1().Deployments(e.ns).Get(e.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

var metav1GetOptions = metav1.GetOptions{}

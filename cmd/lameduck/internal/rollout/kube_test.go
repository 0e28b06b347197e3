package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// fakeCluster plays the Deployment controller, the kubelet and the
// EndpointSlice controller for one Deployment on client-go's fake
// clientset: on each change of the pod template's restartedAt annotation
// it creates a new ReplicaSet and its pods (ready, in the slice), then
// deletes the old ones as the API does (deletionTimestamp, the endpoint
// not ready and terminating, the Killing event, the container's
// termination, the object gone). A pod of the template listed in kill
// exits 137 (SIGKILL at the grace period) instead of 0.
type fakeCluster struct {
	t        *testing.T
	cs       *fake.Clientset
	ns, name string
	replicas int32
	kill     map[int]bool // rounds whose first old pod is SIGKILLed

	mu       sync.Mutex
	revision int
	pods     []string // current pods
}

const fakeUID = types.UID("dep-uid")

func newFakeCluster(t *testing.T, replicas int32) *fakeCluster {
	f := &fakeCluster{t: t, ns: "shop", name: "web", replicas: replicas, kill: map[int]bool{}}
	grace := int64(30)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: f.name, Namespace: f.ns, UID: fakeUID, Generation: 1},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: &grace},
			},
		},
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Namespace: f.ns}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: f.ns, Labels: map[string]string{"app": "db"}}}
	f.cs = fake.NewClientset(dep, slice, other)
	f.rollOut(context.Background(), 1)
	return f
}

func (f *fakeCluster) now() *metav1.Time { t := metav1.Now(); return &t }

// rollOut creates revision rev: its ReplicaSet and ready pods, in the
// slice, the Deployment's status complete; and deletes the old pods.
func (f *fakeCluster) rollOut(ctx context.Context, rev int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hash := fmt.Sprintf("h%d", rev)
	yes := true
	_, err := f.cs.AppsV1().ReplicaSets(f.ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: f.name + "-" + hash, Namespace: f.ns, Labels: map[string]string{"app": "web", "pod-template-hash": hash},
		Annotations:     map[string]string{"deployment.kubernetes.io/revision": fmt.Sprint(rev)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: f.name, UID: fakeUID, Controller: &yes}},
	}}, metav1.CreateOptions{})
	f.check(err)
	old := f.pods
	f.pods = nil
	for i := range f.replicas {
		name := fmt.Sprintf("%s-%s-%d", f.name, hash, i)
		_, err := f.cs.CoreV1().Pods(f.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, CreationTimestamp: *f.now(),
				Labels: map[string]string{"app": "web", "pod-template-hash": hash}},
			Spec: corev1.PodSpec{NodeName: "node-1"},
			Status: corev1.PodStatus{PodIP: fmt.Sprintf("10.0.%d.%d", rev, i), Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: *f.now()}}},
		}, metav1.CreateOptions{})
		f.check(err)
		f.pods = append(f.pods, name)
	}
	f.setSlice(ctx, old)
	dep, err := f.cs.AppsV1().Deployments(f.ns).Get(ctx, f.name, metav1.GetOptions{})
	f.check(err)
	if dep.Annotations == nil {
		dep.Annotations = map[string]string{}
	}
	dep.Annotations["deployment.kubernetes.io/revision"] = fmt.Sprint(rev)
	if rev > 1 {
		dep.Generation++ // the API server's, on a change of the template
	}
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: f.replicas,
		UpdatedReplicas: f.replicas, AvailableReplicas: f.replicas, ReadyReplicas: f.replicas}
	_, err = f.cs.AppsV1().Deployments(f.ns).Update(ctx, dep, metav1.UpdateOptions{})
	f.check(err)
	for i, name := range old {
		f.terminate(ctx, name, rev-1, i == 0 && f.kill[rev-1])
	}
	f.setSlice(ctx, nil)
}

// setSlice lists the current pods ready and the terminating ones not.
func (f *fakeCluster) setSlice(ctx context.Context, terminating []string) {
	yes, no := true, false
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Namespace: f.ns}}
	for _, n := range f.pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: n}})
	}
	for _, n := range terminating {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.2"},
			Conditions: discoveryv1.EndpointConditions{Ready: &no, Serving: &no, Terminating: &yes},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: n}})
	}
	_, err := f.cs.DiscoveryV1().EndpointSlices(f.ns).Update(ctx, s, metav1.UpdateOptions{})
	f.check(err)
}

// terminate deletes a pod as the API and the kubelet do.
func (f *fakeCluster) terminate(ctx context.Context, name string, round int, killed bool) {
	pods := f.cs.CoreV1().Pods(f.ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	f.check(err)
	grace := int64(30)
	deadline := metav1.NewTime(time.Now().Add(30 * time.Second))
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &deadline, &grace
	p, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	f.check(err)
	_, err = f.cs.CoreV1().Events(f.ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name + ".killing", Namespace: f.ns, UID: types.UID(name + "-ev")},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: name, Namespace: f.ns},
		Reason:         "Killing", Message: "Stopping container app", Type: "Normal", Count: 1, LastTimestamp: *f.now(),
	}, metav1.CreateOptions{})
	f.check(err)
	code, reason := int32(0), "Completed"
	if killed {
		code, reason = 137, "Error"
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: *f.now()}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, FinishedAt: *f.now(), ContainerID: "containerd://" + name}}}}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	f.check(err)
	f.check(pods.Delete(ctx, name, metav1.DeleteOptions{}))
}

func (f *fakeCluster) check(err error) {
	if err != nil {
		f.t.Error(err)
	}
}

// run plays the controllers until ctx ends: each new restartedAt rolls
// the pods.
func (f *fakeCluster) run(ctx context.Context) {
	last, rev := "", 1
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		dep, err := f.cs.AppsV1().Deployments(f.ns).Get(ctx, f.name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if at := dep.Spec.Template.Annotations[restartedAtAnnotation]; at != last && at != "" {
			last = at
			rev++
			f.rollOut(ctx, rev)
		}
	}
}

func kubeTestOptions(t *testing.T, cs kubernetes.Interface) KubeOptions {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	return KubeOptions{client: cs, Namespace: "shop", Deployment: "deployment/web", URL: srv.URL,
		Load: Load{Rounds: 2, Rate: 50, GetPath: "/", PostPath: "/echo", Timeout: 10 * time.Second,
			Warmup: 100 * time.Millisecond, Cooldown: 100 * time.Millisecond},
		RolloutTimeout: 20 * time.Second, poll: 20 * time.Millisecond}
}

// TestRunKubeFake runs the whole cluster mode against the fake clientset:
// two restarts, each as kubectl rollout restart does it; the report has
// every pod of the three templates with its timeline, and the SIGKILLed
// one counted.
func TestRunKubeFake(t *testing.T) {
	f := newFakeCluster(t, 2)
	f.kill[1] = true // the first pod the first restart deletes is SIGKILLed
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	rep, err := RunKube(context.Background(), kubeTestOptions(t, f.cs))
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Log(text.String())
	if rep.Mode != ModeCluster || rep.Failed != 0 || rep.Requests == 0 || rep.Replicas != 2 {
		t.Errorf("mode %s, %d of %d failed, %d replicas; want cluster, 0 of some, 2", rep.Mode, rep.Failed, rep.Requests, rep.Replicas)
	}
	c := rep.Cluster
	if c == nil || len(c.RoundReports) != 2 || c.Namespace != "shop" || c.Deployment != "web" || c.GraceSeconds != 30 {
		t.Fatalf("cluster %+v; want 2 rounds of shop/web, grace 30", c)
	}
	for i, r := range c.RoundReports {
		if r.Round != i+1 || r.RestartedAt == "" || r.Complete < r.Restarted || r.Revision != fmt.Sprint(i+2) {
			t.Errorf("round report %+v; want round %d, revision %d, complete after restarted", r, i+1, i+2)
		}
	}
	if c.KilledPods != 1 {
		t.Errorf("%d killed pods; want 1", c.KilledPods)
	}
	if len(rep.Pods) != 6 {
		t.Fatalf("%d pods; want 6 (2 per template, not the db pod)", len(rep.Pods))
	}
	for i, p := range rep.Pods {
		if want := i / 2; p.Round != want {
			t.Errorf("pod %s: round %d; want %d", p.Name, p.Round, want)
		}
		if p.Round == 2 {
			if p.DeletionRequested != nil || p.Exited != nil || p.Ready == nil || p.EndpointReady == nil {
				t.Errorf("pod %s of the last round: %+v; want ready, serving, not deleted", p.Name, p)
			}
			continue
		}
		if p.DeletionRequested == nil || p.EndpointNotReady == nil || p.EndpointRemoved == nil || p.Exited == nil ||
			p.Deleted == nil || p.KillingEvents != 1 || p.GraceSeconds == nil || *p.GraceSeconds != 30 {
			t.Errorf("pod %s: %+v; want its deletion, endpoint not ready and removed, exit, deletion and one Killing event", p.Name, p)
		}
		if p.DeletionToExit == nil || *p.DeletionToExit < 0 || *p.DeletionToExit > 5 {
			t.Errorf("pod %s: deletion→exit %v; want about 0s (the request time is deletionTimestamp − grace)", p.Name, p.DeletionToExit)
		}
		wantKilled := p.Round == 0 && strings.HasSuffix(p.Name, "-0")
		if p.Killed != wantKilled || len(p.Containers) != 1 || (p.Containers[0].ExitCode == 137) != wantKilled {
			t.Errorf("pod %s: killed %v, containers %+v; want killed %v", p.Name, p.Killed, p.Containers, wantKilled)
		}
	}
	for _, want := range []string{"SIGKILL at grace", "deletion requested: grace 30s", "endpoint not ready: ready=false serving=false terminating=true",
		"event Killing: Stopping container app", "container terminated: app: exit code 137 (Error)", "PASS: none of"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report lacks %q", want)
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Failed int `json:"failed"`
		Pods   []struct {
			Name     string `json:"name"`
			Timeline []struct {
				At   float64 `json:"at"`
				What string  `json:"what"`
			} `json:"timeline"`
		} `json:"pods"`
		Cluster      map[string]any `json:"cluster"`
		RemovalDelay any            `json:"removal_delay"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Pods) != 6 || len(back.Pods[0].Timeline) == 0 || back.Cluster["killed_pods"] != 1.0 || back.RemovalDelay != nil {
		t.Errorf("JSON report: %v; %s", err, js.String())
	}
	html := t.TempDir() + "/r.html"
	if err := rep.WriteHTMLFile(html); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(html); !bytes.Contains(b, []byte("deployment/web")) || !bytes.Contains(b, []byte("event Killing")) {
		t.Errorf("the HTML report lacks the Deployment or the timelines")
	}
}

// A paused Deployment is refused, as kubectl rollout restart refuses it;
// a missing one and a rollout that never completes are setup errors that
// say why.
func TestRunKubeSetupErrors(t *testing.T) {
	t.Run("paused", func(t *testing.T) {
		f := newFakeCluster(t, 1)
		dep, _ := f.cs.AppsV1().Deployments("shop").Get(context.Background(), "web", metav1.GetOptions{})
		dep.Spec.Paused = true
		_, _ = f.cs.AppsV1().Deployments("shop").Update(context.Background(), dep, metav1.UpdateOptions{})
		_, err := RunKube(context.Background(), kubeTestOptions(t, f.cs))
		if !errorsIsSetup(err) || !strings.Contains(err.Error(), "is paused") {
			t.Errorf("got %v; want a setup error saying it is paused", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		opt := kubeTestOptions(t, fake.NewClientset())
		_, err := RunKube(context.Background(), opt)
		if !errorsIsSetup(err) || !strings.Contains(err.Error(), "deployment/web not found in namespace shop") {
			t.Errorf("got %v; want a setup error naming the Deployment and the namespace", err)
		}
	})
	t.Run("never complete", func(t *testing.T) {
		f := newFakeCluster(t, 1) // nobody plays the controllers: the restart never rolls out
		opt := kubeTestOptions(t, f.cs)
		opt.RolloutTimeout = 500 * time.Millisecond
		_, err := RunKube(context.Background(), opt)
		if !errorsIsSetup(err) || !strings.Contains(err.Error(), "round 1: deployment/web not complete within --rollout-timeout 500ms") {
			t.Errorf("got %v; want a setup error naming round 1 and --rollout-timeout", err)
		}
	})
}

func errorsIsSetup(err error) bool {
	return err != nil && strings.Contains(err.Error(), ErrSetup.Error())
}

func TestKubeValidate(t *testing.T) {
	good := KubeOptions{Deployment: "web", URL: "http://10.96.0.10:80",
		Load: Load{Rounds: 1, Rate: 1, GetPath: "/", Timeout: time.Second}, RolloutTimeout: time.Minute}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		change func(*KubeOptions)
		want   string
	}{
		{func(o *KubeOptions) { o.Deployment = "statefulset/db" }, "only a Deployment"},
		{func(o *KubeOptions) { o.Deployment = "deployment/Web_1" }, "not a Deployment name"},
		{func(o *KubeOptions) { o.URL = "" }, "--url is required"},
		{func(o *KubeOptions) { o.URL = "10.96.0.10:80" }, `--url="10.96.0.10:80"`},
		{func(o *KubeOptions) { o.URL = "http://10.96.0.10/api" }, "without a path"},
		{func(o *KubeOptions) { o.Rounds = 0 }, "--rounds=0"},
		{func(o *KubeOptions) { o.RolloutTimeout = 0 }, "--rollout-timeout=0s"},
	} {
		o := good
		c.change(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
	for _, s := range []string{"web", "deployment/web", "deploy/web", "deployments/web", "deployment.apps/web"} {
		if n, err := deploymentName(s); n != "web" || err != nil {
			t.Errorf("deploymentName(%q) = %q, %v; want web", s, n, err)
		}
	}
}

// The tracker's reading of the API: a deletion was asked at
// deletionTimestamp minus its grace period; endpoint conditions left
// unset follow the API's rules; events from before the run are not the
// run's.
func TestPodTrackerRules(t *testing.T) {
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := start.Add(5 * time.Second)
	tr := newPodTracker(start, func() time.Time { return now }, nil)
	grace := int64(20)
	deadline := metav1.NewTime(start.Add(25 * time.Second))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"pod-template-hash": "h"},
		DeletionTimestamp: &deadline, DeletionGracePeriodSeconds: &grace}}
	tr.onPod(pod)
	tr.onSlice(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Endpoints: []discoveryv1.Endpoint{
		{TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "p"}}}})
	tr.onEvent(&corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: "old"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p"},
		Reason: "Scheduled", LastTimestamp: metav1.NewTime(start.Add(-time.Hour))})
	reps := tr.podReports()
	if len(reps) != 1 {
		t.Fatalf("%d pods", len(reps))
	}
	var whats []string
	for _, e := range reps[0].Timeline {
		whats = append(whats, e.What+"|"+e.APITime+"|"+e.Detail)
	}
	got := strings.Join(whats, "\n")
	for _, want := range []string{
		"deletion requested|2026-01-01T12:00:05Z|grace 20s, SIGKILL deadline 2026-01-01T12:00:25Z",
		"endpoint ready||ready=true serving=true terminating=false in EndpointSlice s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("timeline:\n%s\nwant an entry %q", got, want)
		}
	}
	if strings.Contains(got, "Scheduled") {
		t.Errorf("timeline:\n%s\nwant no event from before the run", got)
	}
}

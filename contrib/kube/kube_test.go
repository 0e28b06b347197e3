package ldkube_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	ldkube "github.com/lameduck/lameduck/contrib/kube"
	"github.com/lameduck/lameduck/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runner() *fake.Clientset {
	return fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner-0", Namespace: "jobs"}})
}

// cost is the pod's deletion-cost annotation, "" when absent.
func cost(t *testing.T, cs *fake.Clientset) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("jobs").Get(t.Context(), "runner-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations[ldkube.Annotation]
}

// The annotation is the busy cost while a job runs, on the real pod object
// (through the API, a merge patch), and gone when the last of two
// overlapping jobs ends; the job's error comes back unchanged.
func TestDeletionCostWhileBusy(t *testing.T) {
	cs := runner()
	d, err := ldkube.NewDeletionCost(cs, "jobs", "runner-0", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	var started, release, done [2]chan struct{}
	for i := range 2 {
		started[i], release[i], done[i] = make(chan struct{}), make(chan struct{}), make(chan struct{})
		h := d.Handle(func(ctx context.Context, _ worker.Job) error {
			close(started[i])
			<-release[i]
			if i == 1 {
				return boom
			}
			return nil
		})
		go func() {
			defer close(done[i])
			err := h(context.Background(), nil)
			if i == 1 && !errors.Is(err, boom) || i == 0 && err != nil {
				t.Errorf("job %d: %v", i, err)
			}
		}()
		<-started[i]
		if got := cost(t, cs); got != "1000" || !d.Busy() {
			t.Fatalf("job %d running: cost %q, busy %v; want \"1000\", true", i, got, d.Busy())
		}
	}
	close(release[0])
	<-done[0]
	if got := cost(t, cs); got != "1000" || !d.Busy() {
		t.Errorf("one of two jobs done: cost %q, busy %v; want \"1000\", true", got, d.Busy())
	}
	close(release[1])
	<-done[1]
	if got := cost(t, cs); got != "" || d.Busy() {
		t.Errorf("idle: cost %q, busy %v; want no annotation", got, d.Busy())
	}
	var patches int
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	if patches != 2 {
		t.Errorf("%d patches; want 2 (busy, then idle): a second job changes nothing", patches)
	}
}

// A patch the API refuses (a Role without patch) is logged, and the job
// runs anyway.
func TestDeletionCostRefusedPatch(t *testing.T) {
	cs := runner()
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New(`pods "runner-0" is forbidden: User cannot patch resource "pods"`)
	})
	var logs bytes.Buffer
	d, err := ldkube.NewDeletionCost(cs, "jobs", "runner-0", 5, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := d.Handle(func(context.Context, worker.Job) error { ran = true; return nil })(t.Context(), nil); err != nil || !ran {
		t.Fatalf("job: ran %v, err %v", ran, err)
	}
	if !strings.Contains(logs.String(), "cannot set the pod's deletion cost") || !strings.Contains(logs.String(), "forbidden") {
		t.Errorf("the log does not say the patch failed:\n%s", logs.String())
	}
}

// Bad arguments are errors that name them.
func TestNewDeletionCostRefuses(t *testing.T) {
	for _, c := range []struct {
		ns, pod string
		cost    int
		want    string
	}{
		{"", "runner-0", 0, "both are required"},
		{"jobs", "", 0, "both are required"},
		{"jobs", "runner-0", -1, "must not be negative"},
	} {
		if _, err := ldkube.NewDeletionCost(runner(), c.ns, c.pod, c.cost, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v; want %q", c, err, c.want)
		}
	}
	if _, err := ldkube.NewDeletionCost(nil, "jobs", "runner-0", 0, nil); err == nil || !strings.Contains(err.Error(), "client is nil") {
		t.Errorf("nil client: %v", err)
	}
}

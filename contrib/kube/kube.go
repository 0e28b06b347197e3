// Package ldkube tells Kubernetes which runner pods are busy, so that a
// scale-in removes idle runners first.
//
// When a Deployment (its ReplicaSet) scales in, it picks the pods to
// delete by a ranking in which, among pods alike, a lower
// controller.kubernetes.io/pod-deletion-cost goes first
// (https://kubernetes.io/docs/concepts/workloads/controllers/replicaset/#pod-deletion-cost).
// Without it the ReplicaSet may delete a runner in the middle of an
// hours-long job while an idle one stays. [DeletionCost] sets the
// annotation on the runner's own pod while at least one job runs, and
// removes it when none does.
//
// The pod's ServiceAccount needs get and patch on pods in its namespace
// (docs/runners.md, "Scale-in removes idle runners first", has the Role).
// The core lameduck module imports nothing outside the standard library;
// this module is where client-go comes in.
package ldkube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/lameduck/lameduck/worker"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Annotation is the pod annotation the ReplicaSet controller reads on a
// scale-in: pods with a lower cost are deleted first.
const Annotation = "controller.kubernetes.io/pod-deletion-cost"

// DefaultBusyCost is the cost DeletionCost sets while a job runs: above
// every pod without the annotation (cost 0), so idle runners go first.
const DefaultBusyCost = 1000

// patchTimeout bounds one patch of the pod: the cost is a hint, and a job
// never waits longer than this for the API server.
const patchTimeout = 5 * time.Second

// DeletionCost keeps a pod's pod-deletion-cost annotation at BusyCost while
// at least one job it wraps runs, and removes it when none does. Create one
// with [NewDeletionCost] and wrap each loop's Handle with [DeletionCost.Handle].
// Its methods are safe for concurrent use; a patch is never sent while a
// lock other than its own is held.
type DeletionCost struct {
	cs        kubernetes.Interface
	namespace string
	pod       string
	busyCost  int
	log       *slog.Logger

	mu      sync.Mutex
	running int // guarded by mu: jobs running under Handle

	patchMu sync.Mutex // serializes patches, so the last one sent says the last state
	set     bool       // guarded by patchMu: the annotation is on the pod, as far as we know
}

// NewDeletionCost returns a DeletionCost for pod in namespace, patched
// through cs, with cost busyCost while busy (DefaultBusyCost when 0; a
// negative cost is an error, since it would make busy pods go first) and
// its failures logged to log (slog.Default when nil). namespace and pod
// usually come from the downward API (metadata.namespace and metadata.name
// as environment variables). It returns an error naming the empty argument
// when cs, namespace or pod is missing.
func NewDeletionCost(cs kubernetes.Interface, namespace, pod string, busyCost int, log *slog.Logger) (*DeletionCost, error) {
	switch {
	case cs == nil:
		return nil, errors.New("lameduck: ldkube.NewDeletionCost: the Kubernetes client is nil; build one with rest.InClusterConfig and kubernetes.NewForConfig")
	case namespace == "" || pod == "":
		return nil, fmt.Errorf("lameduck: ldkube.NewDeletionCost: namespace %q, pod %q: both are required; pass metadata.namespace and metadata.name through the downward API", namespace, pod)
	case busyCost < 0:
		return nil, fmt.Errorf("lameduck: ldkube.NewDeletionCost: busy cost %d: must not be negative, or busy pods would be deleted first; use 0 for %d", busyCost, DefaultBusyCost)
	}
	if busyCost == 0 {
		busyCost = DefaultBusyCost
	}
	if log == nil {
		log = slog.Default()
	}
	return &DeletionCost{cs: cs, namespace: namespace, pod: pod, busyCost: busyCost, log: log}, nil
}

// Handle wraps a loop's Handle: the first job to start sets the annotation
// to the busy cost before h runs, and the last to end removes it after h
// returns. A patch that fails is logged and does not fail the job (the
// cost is a hint to the ReplicaSet, not a lock): the job runs either way.
// It returns h's error unchanged.
func (d *DeletionCost) Handle(h func(ctx context.Context, job worker.Job) error) func(ctx context.Context, job worker.Job) error {
	return func(ctx context.Context, job worker.Job) error {
		d.mu.Lock()
		d.running++
		d.mu.Unlock()
		d.sync()
		defer func() {
			d.mu.Lock()
			d.running--
			d.mu.Unlock()
			d.sync()
		}()
		return h(ctx, job)
	}
}

// Busy reports whether a job wrapped by Handle is running.
func (d *DeletionCost) Busy() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running > 0
}

// sync patches the pod to the current state, if it differs from the last
// one sent. Patches are serialized, and each reads the state when it is
// its turn, so the pod ends with the annotation the last state asks for.
func (d *DeletionCost) sync() {
	d.patchMu.Lock()
	defer d.patchMu.Unlock()
	want := d.Busy()
	if want == d.set {
		return
	}
	value := "null"
	if want {
		value = strconv.Quote(strconv.Itoa(d.busyCost))
	}
	patch := []byte(`{"metadata":{"annotations":{"` + Annotation + `":` + value + `}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), patchTimeout)
	defer cancel()
	if _, err := d.cs.CoreV1().Pods(d.namespace).Patch(ctx, d.pod, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "lameduck-ldkube"}); err != nil {
		d.log.Warn("lameduck: ldkube: cannot set the pod's deletion cost; a scale-in may pick this busy pod: check the Role (get, patch on pods)",
			"pod", d.namespace+"/"+d.pod, "busy", want, "error", err.Error())
		return
	}
	d.set = want
}

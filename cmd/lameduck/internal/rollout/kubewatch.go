package rollout

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// What a pod's timeline entries are (TimelineEntry.What).
const (
	tlCreated    = "created"            // the pod object was created (API time: creationTimestamp)
	tlReady      = "ready"              // its Ready condition turned true (API time: the condition's lastTransitionTime)
	tlNotReady   = "not ready"          // its Ready condition turned false
	tlDeletion   = "deletion requested" // metadata.deletionTimestamp was set (API time: when the deletion was asked)
	tlEPReady    = "endpoint ready"     // its endpoint in an EndpointSlice has ready=true
	tlEPNotReady = "endpoint not ready" // its endpoint has ready=false (with serving and terminating in the detail)
	tlEPRemoved  = "endpoint removed"   // it is in no EndpointSlice any more
	tlExited     = "container terminated"
	tlEventFmt   = "event %s" // a Kubernetes Event about the pod, by reason: "event Killing"
	tlGone       = "deleted"  // the pod object is gone from the API
)

// TimelineEntry is one thing the Kubernetes API said about a pod.
type TimelineEntry struct {
	// At is when the watch delivered it, in seconds from the start of the
	// rollout (the clock of the machine running lameduck).
	At float64 `json:"at"`
	// APITime is the API's own timestamp of it, RFC 3339 (to the second
	// for most fields), when the API records one: creationTimestamp, a
	// condition's lastTransitionTime, the time the deletion was requested
	// (deletionTimestamp minus deletionGracePeriodSeconds), a container's
	// finishedAt, an Event's last time.
	APITime string `json:"api_time,omitempty"`
	// What is one of: "created", "ready", "not ready", "deletion
	// requested", "endpoint ready", "endpoint not ready", "endpoint
	// removed", "container terminated", "event REASON" (Killing,
	// Unhealthy, FailedPreStopHook, ExceededGracePeriod, …), "deleted".
	What string `json:"what"`
	// Detail says more: the grace period of a deletion, an endpoint's
	// serving and terminating conditions, a container's exit code and
	// reason, an Event's message.
	Detail string `json:"detail,omitempty"`
}

// ContainerExit is one container's termination as its pod's status
// reported it.
type ContainerExit struct {
	Name     string `json:"name"`
	ExitCode int32  `json:"exit_code"`
	Signal   int32  `json:"signal,omitempty"`
	// Reason is the runtime's: Completed (exit 0), Error, OOMKilled, ….
	Reason string `json:"reason"`
	// FinishedAt is the runtime's time of the exit, RFC 3339, to the
	// second.
	FinishedAt string `json:"finished_at"`
	// At is when the watch delivered it, seconds from the start.
	At float64 `json:"at"`
	// Killed: exit code 137 (SIGKILL) with a reason other than
	// OOMKilled: the kubelet killed it at the end of the grace period.
	Killed bool `json:"killed"`
	// OOMKilled: the kernel's OOM killer ended it.
	OOMKilled bool `json:"oom_killed"`

	finished time.Time
}

// podState is what the watches said of one pod. Guarded by its tracker's
// mu.
type podState struct {
	name, hash, node, ip string
	seen                 bool // a pod object was seen (not only a slice or an event naming it)
	round                int
	created              time.Time
	grace                *int64 // the deletion's grace period, else spec.terminationGracePeriodSeconds
	ready                bool
	deletion             time.Time // observed; zero until seen
	deletionAPI          time.Time // when the API says it was asked
	gone                 bool

	eps     map[string]epCond // by EndpointSlice name
	epState string            // the last combined endpoint state recorded; "" when in no slice

	exits    []ContainerExit
	exitSeen map[string]bool  // container ID (or name/restart count) → recorded
	evCount  map[string]int32 // Event UID → count recorded
	timeline []TimelineEntry
	first    map[string]float64 // What → At of its first entry
}

type epCond struct{ ready, serving, terminating bool }

func (c epCond) String() string {
	return fmt.Sprintf("ready=%t serving=%t terminating=%t", c.ready, c.serving, c.terminating)
}

// podTracker turns the watches of a Deployment's pods, the namespace's
// EndpointSlices and its Events into each pod's timeline. Its handlers are
// safe for concurrent use (each informer calls them from its own
// goroutine); it never blocks on I/O.
type podTracker struct {
	now   func() time.Time
	start time.Time
	// selects reports whether a pod belongs to the Deployment (its
	// selector); slices and events name pods of other workloads too.
	selects func(*corev1.Pod) bool

	mu        sync.Mutex // guards the fields below
	pods      map[string]*podState
	round     int            // the round whose restart was asked last; 0 before the first
	hashRound map[string]int // pod-template-hash → the round it first appeared in
}

func newPodTracker(start time.Time, now func() time.Time, selects func(*corev1.Pod) bool) *podTracker {
	return &podTracker{now: now, start: start, selects: selects, pods: map[string]*podState{}, hashRound: map[string]int{}}
}

func (t *podTracker) offset(at time.Time) float64 { return secs(at.Sub(t.start)) }

// setRound records that round's restart is being asked: pods of a
// template not seen before belong to it.
func (t *podTracker) setRound(round int) {
	t.mu.Lock()
	t.round = round
	t.mu.Unlock()
}

func (t *podTracker) podLocked(name string) *podState {
	p := t.pods[name]
	if p == nil {
		p = &podState{name: name, eps: map[string]epCond{}, exitSeen: map[string]bool{}, evCount: map[string]int32{}, first: map[string]float64{}}
		t.pods[name] = p
	}
	return p
}

// addLocked appends an entry at the observed time now to p's timeline.
func (t *podTracker) addLocked(p *podState, now time.Time, api time.Time, what, detail string) {
	e := TimelineEntry{At: t.offset(now), What: what, Detail: detail}
	if !api.IsZero() {
		e.APITime = api.UTC().Format(time.RFC3339)
	}
	p.timeline = append(p.timeline, e)
	if _, ok := p.first[what]; !ok {
		p.first[what] = e.At
	}
}

// handlers returns the informer callbacks for the kind of obj's informer.
func (t *podTracker) handlers(onAdd, onDelete func(any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    onAdd,
		UpdateFunc: func(_, obj any) { onAdd(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			onDelete(obj)
		},
	}
}

// onPod records what changed in a pod (added or updated).
func (t *podTracker) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || (t.selects != nil && !t.selects(pod)) {
		return
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.podLocked(pod.Name)
	if !p.seen {
		p.seen = true
		p.hash = pod.Labels["pod-template-hash"]
		r, ok := t.hashRound[p.hash]
		if !ok {
			r = t.round
			t.hashRound[p.hash] = r
		}
		p.round = r
		p.created = pod.CreationTimestamp.Time
		t.addLocked(p, now, p.created, tlCreated, "")
	}
	p.node, p.ip = pod.Spec.NodeName, pod.Status.PodIP
	if pod.Spec.TerminationGracePeriodSeconds != nil && p.grace == nil {
		p.grace = pod.Spec.TerminationGracePeriodSeconds
	}
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodReady {
			continue
		}
		if ready := c.Status == corev1.ConditionTrue; ready != p.ready {
			p.ready = ready
			what := tlReady
			if !ready {
				what = tlNotReady
			}
			t.addLocked(p, now, c.LastTransitionTime.Time, what, c.Reason)
		}
	}
	if pod.DeletionTimestamp != nil && p.deletion.IsZero() {
		p.deletion = now
		deadline := pod.DeletionTimestamp.Time
		detail := "deadline " + deadline.UTC().Format(time.RFC3339)
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			p.grace = g
			p.deletionAPI = deadline.Add(-time.Duration(*g) * time.Second)
			detail = fmt.Sprintf("grace %ds, SIGKILL deadline %s", *g, deadline.UTC().Format(time.RFC3339))
		} else {
			p.deletionAPI = deadline
		}
		t.addLocked(p, now, p.deletionAPI, tlDeletion, detail)
	}
	statuses := slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses)
	for _, cs := range statuses {
		for _, st := range []corev1.ContainerState{cs.LastTerminationState, cs.State} {
			term := st.Terminated
			if term == nil {
				continue
			}
			key := term.ContainerID
			if key == "" {
				key = fmt.Sprintf("%s/%s", cs.Name, term.FinishedAt.UTC().Format(time.RFC3339Nano))
			}
			if p.exitSeen[key] {
				continue
			}
			p.exitSeen[key] = true
			ce := ContainerExit{Name: cs.Name, ExitCode: term.ExitCode, Signal: term.Signal, Reason: term.Reason,
				FinishedAt: term.FinishedAt.UTC().Format(time.RFC3339), At: t.offset(now),
				OOMKilled: term.Reason == "OOMKilled", finished: term.FinishedAt.Time}
			ce.Killed = term.ExitCode == 137 && !ce.OOMKilled
			p.exits = append(p.exits, ce)
			detail := fmt.Sprintf("%s: exit code %d (%s)", cs.Name, term.ExitCode, term.Reason)
			switch {
			case ce.OOMKilled:
				detail += ": killed by the OOM killer"
			case ce.Killed:
				detail += ": SIGKILL, by the kubelet at the end of the grace period"
			}
			t.addLocked(p, now, term.FinishedAt.Time, tlExited, detail)
		}
	}
}

// onPodGone records that a pod object was deleted from the API.
func (t *podTracker) onPodGone(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.onPod(pod) // its last state may hold what no update showed
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pods[pod.Name]; p != nil && p.seen && !p.gone {
		p.gone = true
		t.addLocked(p, now, time.Time{}, tlGone, "")
	}
}

// onSlice records the endpoint conditions of every pod an EndpointSlice
// lists (added or updated), and the pods it no longer lists.
func (t *podTracker) onSlice(obj any) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	listed := map[string]epCond{}
	for _, ep := range s.Endpoints {
		if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
			continue
		}
		// The API's rules for unset conditions: ready unknown is ready;
		// serving unknown is ready's value; terminating unknown is false.
		c := epCond{ready: ep.Conditions.Ready == nil || *ep.Conditions.Ready}
		c.serving = c.ready
		if ep.Conditions.Serving != nil {
			c.serving = *ep.Conditions.Serving
		}
		c.terminating = ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
		listed[ep.TargetRef.Name] = c
	}
	t.setSlice(s.Name, listed)
}

// onSliceGone records that an EndpointSlice was deleted.
func (t *podTracker) onSliceGone(obj any) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		t.setSlice(s.Name, nil)
	}
}

// setSlice makes slice list exactly the pods of listed, and records each
// pod whose combined endpoint state changed.
func (t *podTracker) setSlice(slice string, listed map[string]epCond) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, p := range t.pods {
		if _, ok := listed[name]; !ok {
			if _, was := p.eps[slice]; was {
				delete(p.eps, slice)
				t.endpointChangedLocked(p, now, slice)
			}
		}
	}
	for name, c := range listed {
		p := t.podLocked(name)
		if old, ok := p.eps[slice]; ok && old == c {
			continue
		}
		p.eps[slice] = c
		t.endpointChangedLocked(p, now, slice)
	}
}

// endpointChangedLocked records p's endpoint state if it changed: ready
// when any slice lists it ready, else the conditions of the first slice
// by name; removed when no slice lists it.
func (t *podTracker) endpointChangedLocked(p *podState, now time.Time, slice string) {
	if len(p.eps) == 0 {
		if p.epState != "" {
			p.epState = ""
			t.addLocked(p, now, time.Time{}, tlEPRemoved, "from EndpointSlice "+slice)
		}
		return
	}
	names := make([]string, 0, len(p.eps))
	for n := range p.eps {
		names = append(names, n)
	}
	slices.Sort(names)
	c := p.eps[names[0]]
	for _, n := range names {
		if p.eps[n].ready {
			c = p.eps[n]
			break
		}
	}
	state := c.String()
	if state == p.epState {
		return
	}
	p.epState = state
	what := tlEPReady
	if !c.ready {
		what = tlEPNotReady
	}
	t.addLocked(p, now, time.Time{}, what, state+" in EndpointSlice "+strings.Join(names, ", "))
}

// onEvent records a Kubernetes Event about a pod (added or updated: a
// repeated Event counts again). Events from before the rollout started
// (kept by the API for an hour) are not the rollout's and are left out.
func (t *podTracker) onEvent(obj any) {
	ev, ok := obj.(*corev1.Event)
	if !ok || ev.InvolvedObject.Kind != "Pod" {
		return
	}
	at := eventTime(ev)
	if at.Before(t.start.Add(-2 * time.Second)) { // API times are to the second
		return
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.podLocked(ev.InvolvedObject.Name)
	count := max(ev.Count, 1)
	if ev.Series != nil {
		count = max(count, ev.Series.Count)
	}
	key := string(ev.UID)
	if key == "" {
		key = ev.Name
	}
	if p.evCount[key] >= count {
		return
	}
	p.evCount[key] = count
	detail := ev.Message
	if count > 1 {
		detail = fmt.Sprintf("%s (×%d)", detail, count)
	}
	t.addLocked(p, now, at, fmt.Sprintf(tlEventFmt, ev.Reason), detail)
}

// eventTime is an Event's latest time as the API records it.
func eventTime(ev *corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.FirstTimestamp.IsZero():
		return ev.FirstTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}

// alive returns the names of the Deployment's pods still in the API whose
// pod-template-hash is not hash (all of them when hash is ""), sorted.
func (t *podTracker) aliveNotOf(hash string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var names []string
	for _, p := range t.pods {
		if p.seen && !p.gone && (hash == "" || p.hash != hash) {
			names = append(names, p.name)
		}
	}
	slices.Sort(names)
	return names
}

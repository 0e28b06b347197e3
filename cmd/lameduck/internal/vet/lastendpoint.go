package vet

import (
	"fmt"
	"strings"

	"github.com/lameduck/lameduck"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkLastEndpoint is last-endpoint: the pod being stopped is its
// Service's last endpoint when a Deployment uses strategy Recreate, or
// RollingUpdate with no surge and maxUnavailable ≥ replicas (one replica
// with maxSurge 0), and on a node whose only local endpoint it is when a
// Service with externalTrafficPolicy: Local selects it. kube-proxy then
// routes to the terminating pod while it stays serving (its readiness),
// since Kubernetes 1.26 (KEP-1669,
// https://github.com/kubernetes/enhancements/tree/master/keps/sig-network/1669-proxy-terminating-endpoints):
//
//   - Recreate: no pod exists from the old one's exit to a new one's
//     readiness, whatever the server does: always reported.
//   - RollingUpdate without surge: a replacement is created as the old pod
//     is deleted; the old one can serve until the replacement is Ready
//     when readiness stays 200 through the window (LAMEDUCK_NOT_READY_AT
//     teardown) and the window lasts until traffic moves (drain mode
//     idle). Reported otherwise.
//   - externalTrafficPolicy: Local: reported when readiness turns 503 at
//     the signal.
//
// Reported once per workload (on its first judged server container) and
// once per such Service, at the strategy (the Service's
// externalTrafficPolicy); runners take no traffic and are not judged here.
func checkLastEndpoint(o *Object, objs []Object, judgedBy map[int][]*judged, i int) []Finding {
	if o.Service != nil {
		return checkLocalPolicy(o, objs, judgedBy)
	}
	j := firstServer(judgedBy[i])
	if j == nil || o.Strategy == nil {
		return nil
	}
	replicas := int32(1)
	if o.Replicas != nil {
		replicas = *o.Replicas
	}
	if replicas == 0 {
		return nil
	}
	c := j.rc
	values := map[string]any{"replicas": replicas, "strategy": string(o.Strategy.Type), "not_ready_at": c.NotReadyAt,
		"drain_mode": c.DrainMode, "window_seconds": seconds(c.ShutdownDelay)}
	if c.DrainMode == lameduck.DrainIdle {
		values["window_seconds"] = seconds(c.DrainTimeout)
	}
	at := o.top.at("strategy")
	line, path := o.lineOf(at), at.path
	f := func(msg, fix string) []Finding {
		return []Finding{{Rule: "last-endpoint", Level: rule("last-endpoint").Level, Object: o.Ref(), Container: j.c.Name,
			File: o.File, Line: line, Field: path, Message: msg, Fix: fix, Values: values}}
	}
	signal := ""
	if c.NotReadyAt == lameduck.NotReadyAtSignal {
		signal = fmt.Sprintf("; and %sNOT_READY_AT=signal turns readiness 503 for the whole window, which switches off kube-proxy's fallback to the terminating pod, so the Service refuses connections from the signal on", c.EnvPrefix)
	}
	if o.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		verb := "keep"
		if c.NotReadyAt != lameduck.NotReadyAtTeardown {
			verb = "set"
		}
		fix := "use strategy RollingUpdate with maxSurge: 1, so a replacement is Ready before the old pod stops; if two versions cannot run at once, the gap stays: " +
			verb + " " + c.EnvPrefix + "NOT_READY_AT=teardown so the old pod serves until its teardown"
		return f(fmt.Sprintf("strategy Recreate stops every old pod before it creates a new one: from the old pod's exit until a new one is Ready (its start and startup probe) no pod serves the Service, whatever the server does%s", signal), fix)
	}
	surge, unavailable, err := rollingBudget(o.Strategy.RollingUpdate, replicas)
	if err != nil {
		return nil // the API server refuses it; not ours to judge
	}
	values["max_surge"], values["max_unavailable"] = surge, unavailable
	if surge > 0 || unavailable < replicas {
		return nil
	}
	if c.NotReadyAt == lameduck.NotReadyAtTeardown && c.DrainMode == lameduck.DrainIdle {
		return nil // the old pod serves until traffic moves to the Ready replacement
	}
	why := signal
	if why == "" {
		why = fmt.Sprintf("; and drain mode %s ends the %s window whether or not the replacement is Ready yet", c.DrainMode, c.ShutdownDelay)
	}
	return f(fmt.Sprintf("%d replica(s) with maxSurge %d and maxUnavailable %d: every pod may be stopped before its replacement is Ready, so the pod being stopped is the Service's last endpoint%s",
		replicas, surge, unavailable, why),
		"set maxSurge: 1 (a replacement is Ready before the old pod stops); or set "+c.EnvPrefix+"NOT_READY_AT=teardown and "+c.EnvPrefix+
			"DRAIN_MODE=idle, so the old pod keeps serving, kube-proxy falling back to it, until traffic moves to the Ready replacement (docs/probes-and-shutdown.md, \"When readiness turns 503\")")
}

// checkLocalPolicy is last-endpoint for a Service with
// externalTrafficPolicy: Local: on each node, kube-proxy sends external
// traffic only to that node's endpoints, so a node's one pod of the
// workload is its last endpoint there, at every rollout and node drain.
func checkLocalPolicy(svc *Object, objs []Object, judgedBy map[int][]*judged) []Finding {
	s := svc.Service
	if s.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || len(s.Selector) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(s.Selector)
	var names []string
	var first *judged
	for i := range objs {
		o := &objs[i]
		j := firstServer(judgedBy[i])
		if !o.workload() || j == nil || o.Namespace != svc.Namespace || !sel.Matches(labels.Set(o.Labels)) ||
			j.rc.NotReadyAt != lameduck.NotReadyAtSignal {
			continue
		}
		if first == nil {
			first = j
		}
		names = append(names, o.Ref())
	}
	if first == nil {
		return nil
	}
	at := svc.spec.at("externalTrafficPolicy")
	p := first.rc.EnvPrefix
	return []Finding{{Rule: "last-endpoint", Level: rule("last-endpoint").Level, Object: svc.Ref(), Container: first.c.Name,
		File: svc.File, Line: svc.lineOf(at), Field: at.path,
		Message: fmt.Sprintf("externalTrafficPolicy Local sends a node's external traffic only to that node's pods of %s, so a node's last one is its last endpoint at every rollout and node drain; %sNOT_READY_AT=signal turns its readiness 503 at the signal, which switches off kube-proxy's fallback to the terminating pod, and the node drops that traffic until a new pod there is Ready",
			strings.Join(names, ", "), p),
		Fix:    "set " + p + "NOT_READY_AT=teardown, so the pod keeps serving (and kube-proxy falling back to it) through its window; or use externalTrafficPolicy: Cluster",
		Values: map[string]any{"external_traffic_policy": string(s.ExternalTrafficPolicy), "not_ready_at": lameduck.NotReadyAtSignal, "workloads": names},
	}}
}

// firstServer is the first judged container of js that is a server (not a
// runner) and whose settings resolve; nil when none.
func firstServer(js []*judged) *judged {
	for _, j := range js {
		if !j.runner && !j.refused() && j.rc != nil {
			return j
		}
	}
	return nil
}

// rollingBudget resolves a RollingUpdate's maxSurge (rounded up) and
// maxUnavailable (rounded down) against replicas, with the API's defaults
// (25% each) and its rule that both zero means maxUnavailable 1
// (https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#rolling-update-deployment).
func rollingBudget(ru *appsv1.RollingUpdateDeployment, replicas int32) (surge, unavailable int32, err error) {
	quarter := intstr.FromString("25%")
	ms, mu := &quarter, &quarter
	if ru != nil {
		if ru.MaxSurge != nil {
			ms = ru.MaxSurge
		}
		if ru.MaxUnavailable != nil {
			mu = ru.MaxUnavailable
		}
	}
	s, err := intstr.GetScaledValueFromIntOrPercent(ms, int(replicas), true)
	if err != nil {
		return 0, 0, err
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(mu, int(replicas), false)
	if err != nil {
		return 0, 0, err
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u), nil
}

package vet

import (
	"fmt"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkPDBEviction is pdb-unhealthy-eviction: a PodDisruptionBudget that
// selects the pods of a workload with a judged container must set
// unhealthyPodEvictionPolicy: AlwaysAllow. Under the default
// (IfHealthyBudget) a pod that is running but not Ready is evicted only
// while the budget has room, and not-Ready pods count against it: when
// every replica is not Ready (a critical check failing everywhere), no
// eviction is ever allowed and `kubectl drain` of their node never ends
// (https://kubernetes.io/docs/tasks/run-application/configure-pdb/#unhealthy-pod-eviction-policy).
// lameduck's readiness fails on purpose (a critical dependency down,
// starting, superseded), so its pods are not Ready more often than most.
// A workload selects as a PDB does: in the PDB's namespace (both empty
// counts as the same), by its label selector on the pod template's
// labels. Reported once per PDB, at its unhealthyPodEvictionPolicy (its
// spec when absent), naming the first judged container of each workload
// it selects.
func checkPDBEviction(pdb *Object, objs []Object, judgedBy map[int][]*judged) []Finding {
	if pdb.PDB == nil {
		return nil
	}
	policy := pdb.PDB.UnhealthyPodEvictionPolicy
	if policy != nil && *policy == policyv1.AlwaysAllow {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.PDB.Selector)
	if err != nil {
		return nil // the API server refuses it; not ours to judge
	}
	var names []string
	var first *judged
	for i := range objs {
		o := &objs[i]
		js := judgedBy[i]
		if !o.workload() || len(js) == 0 || o.Namespace != pdb.Namespace || !sel.Matches(labels.Set(o.Labels)) {
			continue
		}
		if first == nil {
			first = js[0]
		}
		names = append(names, o.Ref())
	}
	if first == nil {
		return nil
	}
	set := string(policyv1.IfHealthyBudget) + " (unset: the default)"
	if policy != nil {
		set = string(*policy)
	}
	values := map[string]any{"policy": set, "policy_default": policy == nil, "workloads": names}
	at := pdb.spec.at("unhealthyPodEvictionPolicy")
	line, path := pdb.lineOf(at), at.path
	budget := "maxUnavailable " + intOrString(pdb.PDB.MaxUnavailable)
	values["max_unavailable"] = intOrStringValue(pdb.PDB.MaxUnavailable)
	if pdb.PDB.MinAvailable != nil {
		budget = "minAvailable " + intOrString(pdb.PDB.MinAvailable)
		delete(values, "max_unavailable")
		values["min_available"] = intOrStringValue(pdb.PDB.MinAvailable)
	}
	return []Finding{{Rule: "pdb-unhealthy-eviction", Level: rule("pdb-unhealthy-eviction").Level, Object: pdb.Ref(), Container: first.c.Name,
		File: pdb.File, Line: line, Field: path,
		Message: fmt.Sprintf("selects %s with unhealthyPodEvictionPolicy %s: a pod that is running but not Ready counts against %s, so when readiness fails on every replica (a critical check down everywhere) no eviction is allowed and a node drain never ends",
			strings.Join(names, ", "), set, budget),
		Fix:    "set spec.unhealthyPodEvictionPolicy: AlwaysAllow, so a pod that is not Ready can always be evicted (it serves nothing); the budget still guards the Ready ones",
		Values: values,
	}}
}

// intOrStringValue is v for Finding.Values: a JSON number when it is a
// count, the text when a percentage, nil when unset.
func intOrStringValue(v *intstr.IntOrString) any {
	switch {
	case v == nil:
		return nil
	case v.Type == intstr.Int:
		return v.IntVal
	}
	return v.StrVal
}

func intOrString(v *intstr.IntOrString) string {
	if v == nil {
		return "(unset)"
	}
	return v.String()
}

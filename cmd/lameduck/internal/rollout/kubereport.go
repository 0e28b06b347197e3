package rollout

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Cluster describes a rollout on a real cluster (`lameduck rollout
// deployment/NAME`): where it ran and each round's restart.
type Cluster struct {
	Context    string `json:"context"`    // the kubeconfig context
	Server     string `json:"server"`     // the API server's URL
	Namespace  string `json:"namespace"`  // the Deployment's namespace
	Deployment string `json:"deployment"` // its name
	URL        string `json:"url"`        // the URL the load was sent to
	// Strategy is the Deployment's, such as "RollingUpdate maxSurge=25%
	// maxUnavailable=25%".
	Strategy string `json:"strategy"`
	// GraceSeconds is the pod template's terminationGracePeriodSeconds
	// (Kubernetes' default 30 when unset).
	GraceSeconds int64 `json:"grace_seconds"`
	// RoundReports holds each restart, in order.
	RoundReports []RoundReport `json:"round_reports"`
	// KilledPods counts pods with a container SIGKILLed at the end of its
	// grace period (exit code 137, reason not OOMKilled); OOMKilledPods
	// those the OOM killer ended.
	KilledPods    int `json:"killed_pods"`
	OOMKilledPods int `json:"oom_killed_pods"`
}

// RoundReport is one restart of the Deployment. Times are seconds from
// the start of the rollout.
type RoundReport struct {
	Round int `json:"round"`
	// RestartedAt is the kubectl.kubernetes.io/restartedAt annotation set
	// on the pod template, as `kubectl rollout restart` sets it.
	RestartedAt string `json:"restarted_at"`
	// Revision is the Deployment's revision once the round was complete.
	Revision string `json:"revision"`
	// Restarted: the patch was accepted. Complete: the new ReplicaSet was
	// fully available and every old pod gone from the API.
	Restarted float64 `json:"restarted"`
	Complete  float64 `json:"complete"`
}

// PodReport is one pod of the Deployment as the Kubernetes API saw it.
// Times are seconds from the start of the rollout, null when it did not
// happen; "observed" times are when the watch delivered the change
// (sub-second, the clock of the load), the others come from the API's
// own timestamps (to the second).
type PodReport struct {
	Name string `json:"name"`
	// Round is the restart that created it; 0 for the pods that served
	// before the first.
	Round int    `json:"round"`
	Hash  string `json:"pod_template_hash"`
	Node  string `json:"node,omitempty"`
	IP    string `json:"ip,omitempty"`
	// GraceSeconds is the grace period of its deletion
	// (deletionGracePeriodSeconds), else its terminationGracePeriodSeconds.
	GraceSeconds *int64 `json:"grace_seconds"`
	// Created: the API's creationTimestamp (negative for a pod older than
	// the rollout).
	Created *float64 `json:"created"`
	// Ready, DeletionRequested, EndpointReady, EndpointNotReady (its
	// endpoint's last turn to ready=false), EndpointRemoved
	// (in no EndpointSlice), Exited (its last container terminated),
	// Deleted (gone from the API): observed.
	Ready             *float64 `json:"ready"`
	EndpointReady     *float64 `json:"endpoint_ready"`
	DeletionRequested *float64 `json:"deletion_requested"`
	EndpointNotReady  *float64 `json:"endpoint_not_ready"`
	EndpointRemoved   *float64 `json:"endpoint_removed"`
	Exited            *float64 `json:"exited"`
	Deleted           *float64 `json:"deleted"`
	// DeletionToExit is, in the API's own times, from the deletion's
	// request to its last container's finishedAt, in whole seconds.
	DeletionToExit *float64 `json:"deletion_to_exit"`
	// Containers lists every container termination its status showed.
	Containers []ContainerExit `json:"containers"`
	// Killed: a container was SIGKILLed at the end of the grace period
	// (exit code 137, reason not OOMKilled). OOMKilled: the OOM killer
	// ended one.
	Killed    bool `json:"killed"`
	OOMKilled bool `json:"oom_killed"`
	// KillingEvents counts the kubelet's Killing events about it
	// ("Stopping container …": the start of the container's stop,
	// preStop hook then SIGTERM).
	KillingEvents int `json:"killing_events"`
	// Timeline is everything the watches delivered about it, in the
	// order they did.
	Timeline []TimelineEntry `json:"timeline"`
}

// podReports returns each pod of the Deployment seen during the rollout,
// by round, then creation, then name.
func (t *podTracker) podReports() []PodReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []PodReport
	for _, p := range t.pods {
		if !p.seen {
			continue
		}
		pr := PodReport{Name: p.name, Round: p.round, Hash: p.hash, Node: p.node, IP: p.ip, GraceSeconds: p.grace,
			Containers: append([]ContainerExit{}, p.exits...), Timeline: append([]TimelineEntry{}, p.timeline...)}
		slices.SortStableFunc(pr.Timeline, func(a, b TimelineEntry) int {
			switch {
			case a.At < b.At:
				return -1
			case a.At > b.At:
				return 1
			}
			return 0
		})
		first := func(what string, after *float64) *float64 {
			for _, e := range pr.Timeline {
				if e.What == what && (after == nil || e.At >= *after) {
					v := e.At
					return &v
				}
			}
			return nil
		}
		if !p.created.IsZero() {
			v := t.offset(p.created)
			pr.Created = &v
		}
		pr.Ready, pr.EndpointReady = first(tlReady, nil), first(tlEPReady, nil)
		pr.DeletionRequested = first(tlDeletion, nil)
		// The endpoint's last turn to not ready: the watches of pods and
		// slices deliver in their own order, so it may come before the
		// deletion does.
		for _, e := range pr.Timeline {
			switch e.What {
			case tlEPReady:
				pr.EndpointNotReady = nil
			case tlEPNotReady:
				if pr.EndpointNotReady == nil {
					v := e.At
					pr.EndpointNotReady = &v
				}
			}
		}
		pr.EndpointRemoved, pr.Deleted = first(tlEPRemoved, nil), first(tlGone, nil)
		var lastFinish time.Time
		for _, c := range pr.Containers {
			pr.Killed = pr.Killed || c.Killed
			pr.OOMKilled = pr.OOMKilled || c.OOMKilled
			if pr.Exited == nil || c.At > *pr.Exited {
				v := c.At
				pr.Exited = &v
			}
			if c.finished.After(lastFinish) {
				lastFinish = c.finished
			}
		}
		if !p.deletionAPI.IsZero() && !lastFinish.IsZero() {
			// Both to the second, as the API keeps them.
			v := lastFinish.Truncate(time.Second).Sub(p.deletionAPI.Truncate(time.Second)).Seconds()
			pr.DeletionToExit = &v
		}
		for _, e := range pr.Timeline {
			if e.What == fmt.Sprintf(tlEventFmt, "Killing") {
				pr.KillingEvents++
			}
		}
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b PodReport) int {
		if a.Round != b.Round {
			return a.Round - b.Round
		}
		if a.Created != nil && b.Created != nil && *a.Created != *b.Created {
			if *a.Created < *b.Created {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// writeClusterText writes the cluster part of the text report: rounds,
// one line per pod, and each pod's timeline.
func (rep *Report) writeClusterText(b *strings.Builder) {
	c := rep.Cluster
	b.WriteString("rounds (seconds from the start)\n")
	for _, r := range c.RoundReports {
		fmt.Fprintf(b, "  %d  restarted %.2fs (restartedAt %s)  complete %.2fs (%.1fs)  revision %s\n",
			r.Round, r.Restarted, r.RestartedAt, r.Complete, r.Complete-r.Restarted, r.Revision)
	}
	b.WriteString("pods (seconds from the start, as the API's watches delivered them)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  pod\tround\tready\tdeletion\tendpoint not ready\tendpoint removed\texited\tdeletion→exit\texit\tKilling events")
	for _, p := range rep.Pods {
		var codes []string
		for _, ce := range p.Containers {
			code := strconv.Itoa(int(ce.ExitCode)) + " " + ce.Reason
			switch {
			case ce.Killed:
				code += " (SIGKILL at grace)"
			case ce.OOMKilled:
				code += " (OOM)"
			}
			codes = append(codes, code)
		}
		exit := "-"
		if len(codes) > 0 {
			exit = strings.Join(codes, ", ")
		}
		toExit := "-"
		if p.DeletionToExit != nil {
			toExit = fmt.Sprintf("%.0fs", *p.DeletionToExit)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.Name, p.Round, fmtSec(p.Ready), fmtSec(p.DeletionRequested),
			fmtSec(p.EndpointNotReady), fmtSec(p.EndpointRemoved), fmtSec(p.Exited), toExit, exit, p.KillingEvents)
	}
	_ = tw.Flush()
	if c.KilledPods > 0 {
		fmt.Fprintf(b, "SIGKILL: %d pods had a container killed at the end of their grace period (exit code 137): their drain did not fit terminationGracePeriodSeconds\n", c.KilledPods)
	}
	b.WriteString("timelines (at: observed; [API time])\n")
	for _, p := range rep.Pods {
		fmt.Fprintf(b, "  %s (round %d)\n", p.Name, p.Round)
		for _, e := range p.Timeline {
			api := ""
			if e.APITime != "" {
				api = " [" + e.APITime + "]"
			}
			detail := ""
			if e.Detail != "" {
				detail = ": " + e.Detail
			}
			fmt.Fprintf(b, "    %8.2fs  %s%s%s\n", e.At, e.What, detail, api)
		}
	}
}

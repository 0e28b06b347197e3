package kube_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// lastEndpointTopology is a Deployment shape in which the pod being
// stopped is its Service's last endpoint.
type lastEndpointTopology struct {
	name string
	// chart is the chart's strategy value; naive the control's.
	chart map[string]any
	naive appsv1.DeploymentStrategy
	// gapFree: a replacement is created as the old pod is deleted
	// (RollingUpdate, maxSurge 0), so a pod can serve every request; under
	// Recreate none exists from the old pod's exit to the new one's
	// readiness, and what is sent then fails whatever the server does.
	gapFree bool
	// idleBound is the idle drain's bound (drainTimeoutSeconds) of the
	// judged variant: under Recreate traffic never moves elsewhere, so
	// the window always lasts the bound; a short one keeps the run short.
	idleBound int
}

func lastEndpointTopologies() []lastEndpointTopology {
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	return []lastEndpointTopology{
		{
			name:  "one replica, maxSurge 0",
			chart: map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": 0, "maxUnavailable": 1}},
			naive: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &one}},
			gapFree:   true,
			idleBound: 30,
		},
		{
			name: "one replica, Recreate",
			// rollingUpdate: nil removes the default's key (Helm drops a
			// null value), which Recreate forbids.
			chart:     map[string]any{"type": "Recreate", "rollingUpdate": nil},
			naive:     appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			idleBound: 10,
		},
	}
}

// lastEndpointVariant is one server configuration of the chart measured
// in a last-endpoint topology.
type lastEndpointVariant struct {
	name     string
	shutdown map[string]any // the chart's shutdown values
	judged   bool           // asserted on; the others are measured only
}

// lastEndpointVariants are what the test runs: the chart as vet advises
// for these topologies (readiness kept through the window, its default in
// Kubernetes, and the idle drain, so the window lasts until traffic moves
// to the replacement), and with LDTEST_LAST_ENDPOINT_MATRIX=1 every
// combination of when readiness turns 503 and how the window ends, for
// docs/probes-and-shutdown.md's table ("When readiness turns 503").
func lastEndpointVariants(topo lastEndpointTopology) []lastEndpointVariant {
	idle := func(at string) map[string]any {
		return map[string]any{"notReadyAt": at, "drainMode": "idle", "idleWindowSeconds": 3, "drainTimeoutSeconds": topo.idleBound}
	}
	bound := fmt.Sprintf(", idle 3s (bound %ds)", topo.idleBound)
	vs := []lastEndpointVariant{{"lameduck, NOT_READY_AT=teardown" + bound, idle("teardown"), true}}
	if os.Getenv("LDTEST_LAST_ENDPOINT_MATRIX") != "1" {
		return vs
	}
	return append(vs,
		lastEndpointVariant{"lameduck, NOT_READY_AT=signal" + bound, idle("signal"), false},
		lastEndpointVariant{"lameduck, NOT_READY_AT=teardown, delay 5s", map[string]any{"notReadyAt": "teardown", "drainMode": "delay"}, false},
		lastEndpointVariant{"lameduck, NOT_READY_AT=signal, delay 5s", map[string]any{"notReadyAt": "signal", "drainMode": "delay"}, false})
}

// TestLastEndpointLosesNoMoreThanPreStopSleep proves what
// docs/probes-and-shutdown.md ("When readiness turns 503") says: when the
// pod being stopped is its Service's last endpoint, kube-proxy sends to it
// while it stays "serving" (its readiness), since Kubernetes 1.26
// (KEP-1669). One replica through 3 restarts at 200 requests a second,
// through the ClusterIP, fresh connections, beside Go's default server
// alone and with a native `preStop: sleep: {seconds: 5}`, in the same run:
//
//   - Go's default server must fail some requests, or the test could not
//     see a loss; the preStop sleep's count is reported, not judged;
//   - lameduck makes no client re-send a request, and its pods exit 0;
//   - with maxSurge 0 a replacement is created as the old pod is deleted,
//     so a pod can serve every request: lameduck fails none, hence no
//     more than the preStop sleep. Under Recreate no pod exists from the
//     old one's exit to the new one's readiness; what is sent then fails
//     whatever the server does, so the counts (and those sent inside the
//     old pods' lame-duck windows, read from their own logs) are
//     reported, not judged.
func TestLastEndpointLosesNoMoreThanPreStopSleep(t *testing.T) {
	for _, topo := range lastEndpointTopologies() {
		t.Run(topo.name, func(t *testing.T) {
			control := func(name string, sleep int64, mustFail bool) loadResult {
				var r loadResult
				t.Run(name, func(t *testing.T) {
					e := newEnv(t, "control")
					e.deployNaiveAs("naive", naiveShape{Replicas: 1, Strategy: topo.naive, PreStopSleep: sleep})
					url := e.serviceURL("naive")
					pods := e.watchPods("naive")
					r = e.rollUnderLoad("naive", url, rounds)
					t.Logf("%s: %s; examples: %q", name, r, r.Examples)
					if mustFail && r.Failed == 0 {
						t.Errorf("Go's default server lost no request in %d restarts of its last endpoint (%s): the test cannot see a loss", rounds, r)
					}
					logLives(t, pods.lives())
				})
				return r
			}
			naive := control("Go's default server, the control", 0, true)
			sleep := control("Go's default server + preStop sleep 5s", 5, false)
			for _, v := range lastEndpointVariants(topo) {
				t.Run(v.name, func(t *testing.T) {
					e := newEnv(t, "last")
					e.helmInstall("lameduck-demo", map[string]any{"replicaCount": 1, "strategy": topo.chart, "shutdown": v.shutdown})
					url := e.serviceURL("lameduck-demo")
					pods := e.watchPods("demo")
					logs := e.followLogs("demo")
					r := e.rollUnderLoad("lameduck-demo", url, rounds)
					lives := pods.lives()
					logLives(t, lives)
					ws := logs.windows()
					if len(ws) < rounds {
						t.Errorf("the pods' logs show %d lame-duck windows, want %d: %+v", len(ws), rounds, ws)
					}
					alive, inWindow := failedInWindows(r, ws)
					t.Logf("%s: %s; %d in the old pods' lame-duck windows %v (the first: %q); Go's default server %d failed of %d, with preStop sleep %d of %d; examples: %q",
						v.name, r, alive, ws, inWindow, naive.Failed, naive.Total, sleep.Failed, sleep.Total, r.Examples)
					if r.Total < loadRate*10 {
						t.Errorf("only %d requests sent: the load did not run", r.Total)
					}
					if !v.judged {
						return
					}
					if r.Resent != 0 {
						t.Errorf("%d requests were re-sent by the client; want 0", r.Resent)
					}
					if topo.gapFree && (r.Failed != 0 || alive != 0) {
						t.Errorf("%d requests failed (%d in the old pods' lame-duck windows: %q) with a replacement created at the old pod's deletion (preStop sleep: %d); want 0: %v",
							r.Failed, alive, inWindow, sleep.Failed, r.Kinds)
					}
					checkExits(t, lives, logs, rounds, 0)
				})
			}
		})
	}
}

// window is one pod's lame-duck window as its own log tells it: from
// its "lameduck: draining" line to its "lameduck: teardown" line.
type window struct {
	Pod      string
	From, To time.Time
}

func (w window) String() string {
	return fmt.Sprintf("%s %s+%.1fs", w.Pod, w.From.Format("15:04:05.000"), w.To.Sub(w.From).Seconds())
}

// windows reads each pod's lame-duck window from its log; a window whose
// teardown line never came is left out.
func (pl *podLogs) windows() []window {
	from := map[string]time.Time{}
	var out []window
	pl.timed(func(pod, m string, ts time.Time, _ map[string]any) {
		switch {
		case strings.HasPrefix(m, "lameduck: draining"):
			from[pod] = ts
		case strings.HasPrefix(m, "lameduck: teardown"):
			if f, ok := from[pod]; ok {
				out = append(out, window{Pod: pod, From: f, To: ts})
				delete(from, pod)
			}
		}
	})
	return out
}

// windowSlack is kept off each window's end: a request sent just before
// the teardown line may reach the listener after it closed (the log line
// comes first), a race of the sender's scheduling, not of the window.
const windowSlack = 250 * time.Millisecond

// failedInWindows counts the failed requests sent inside a pod's lame-duck
// window, when the pod promised to serve: what the product controls. The
// pods' log and the load read the same clock (the node's). It returns the
// first few of them, with their times, for the failure message.
func failedInWindows(r loadResult, ws []window) (int, []string) {
	n := 0
	var first []string
	for i, at := range r.FailedAt {
		for _, w := range ws {
			if !at.Before(w.From) && at.Before(w.To.Add(-windowSlack)) {
				n++
				if len(first) < 8 {
					first = append(first, fmt.Sprintf("%s (+%.3fs in %s): %s", at.Format("15:04:05.000"), at.Sub(w.From).Seconds(), w.Pod, r.FailedAs[i]))
				}
				break
			}
		}
	}
	return n, first
}

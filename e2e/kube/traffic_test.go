package kube_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// controlRate is each client shape's rate in TestTrafficBesideControls, in
// requests a second: five shapes against two servers at once is 800 a
// second, what this suite's two cores sustain beside the cluster, nginx
// and two Traefiks.
const controlRate = 80

// contender is a server a user could put behind the Service: lameduck's
// chart as shipped, or one of what users write instead.
type contender struct {
	name      string
	slug      string // its namespace's prefix
	lameduck  bool
	container string              // the pods' app container
	deploy    func(e *env) string // makes the Deployment and Service (and PDB), returns their name
}

// contenders are lameduck and the three controls, each shaped as the
// chart (3 replicas, one surge, none unavailable, readiness every 2s, a
// PodDisruptionBudget of one), so only the server differs.
func contenders() []contender {
	naive := func(mode string, sleep int64) func(e *env) string {
		return func(e *env) string {
			one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
			e.deployNaiveAs("naive", naiveShape{Replicas: 3, PreStopSleep: sleep, Mode: mode, PDB: true,
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}}})
			return "naive"
		}
	}
	return []contender{
		{"lameduck (the chart as shipped)", "lameduck", true, "demo", func(e *env) string { e.helmInstall("lameduck-demo", nil); return "lameduck-demo" }},
		{"hand-written lame duck (503, sleep 5s, Shutdown)", "handwritten", false, "naive", naive("handwritten", 0)},
		{"Go's default server + preStop sleep 5s", "prestop-sleep", false, "naive", naive("", 5)},
		{"Go's default server", "go-default", false, "naive", naive("", 0)},
	}
}

// leaving is one way the pods left, and when.
type leaving struct {
	Name     string
	From, To time.Time
}

// leavings are what leaveEveryWay does, in order; "scale up" is the way
// back between two leavings, measured as well.
var leavings = []string{"rolling restart", "scale down", "scale up", "eviction"}

// leaveEveryWay makes the Deployment's pods leave in every way a cluster
// makes them: restartRounds rolling restarts, `kubectl scale` from 3 to 1
// (and back), and an eviction of every pod through the Eviction API, as
// `kubectl drain` does (each retried while the PodDisruptionBudget refuses
// it). Each waits until the pods that left have exited. It returns when
// each happened, and how many pods were stopped.
func (e *env) leaveEveryWay(name string) ([]leaving, int) {
	e.t.Helper()
	var out []leaving
	stopped := 0
	mark := func(what string, f func() int) {
		from := time.Now()
		stopped += f()
		out = append(out, leaving{what, from, time.Now()})
		e.t.Logf("%s: %s done in %.1fs", name, what, time.Since(from).Seconds())
	}
	const restartRounds = 2
	for range restartRounds {
		mark("rolling restart", func() int { e.restart(name); e.waitRolledOut(name, 4*time.Minute); return 3 })
	}
	mark("scale down", func() int { e.scale(name, 1); e.waitRolledOut(name, 2*time.Minute); return 2 })
	mark("scale up", func() int { e.scale(name, 3); e.waitRolledOut(name, 3*time.Minute); return 0 })
	mark("eviction", func() int { n := e.evictAll(name); e.waitRolledOut(name, 4*time.Minute); return n })
	return out, stopped
}

// scale sets the Deployment's replicas, as `kubectl scale` does.
func (e *env) scale(name string, replicas int32) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := e.cs.AppsV1().Deployments(e.ns).Patch(e.t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// evictAll evicts every pod of the Deployment through the Eviction API at
// once, each retried every second while the PodDisruptionBudget answers
// 429, as `kubectl drain` does for the pods of a node (the node is not
// cordoned: on a one-node cluster the replacements must land on it). It
// returns how many pods it evicted.
func (e *env) evictAll(name string) int {
	e.t.Helper()
	ctx := e.t.Context()
	d := e.deployment(name)
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(pods.Items))
	for i, p := range pods.Items {
		wg.Go(func() {
			for {
				err := e.cs.CoreV1().Pods(e.ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: e.ns}})
				if !apierrors.IsTooManyRequests(err) {
					errs[i] = err
					return
				}
				select {
				case <-ctx.Done():
					errs[i] = fmt.Errorf("evicting pod %s: the PodDisruptionBudget still refused after 4m: %w", p.Name, err)
					return
				case <-time.After(time.Second):
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatal(err)
	}
	return len(pods.Items)
}

// outcome is one contender's count for one client shape.
type outcome struct {
	Contender string
	Shape     clientShape
	Result    loadResult
	Leavings  []leaving
}

// byLeaving counts the failed and re-sent requests sent during each
// leaving; those sent outside every leaving count as "between".
func (o outcome) byLeaving() map[string][2]int {
	out := map[string][2]int{}
	at := func(t time.Time) string {
		for _, l := range o.Leavings {
			if !t.Before(l.From) && t.Before(l.To) {
				return l.Name
			}
		}
		return "between"
	}
	for _, t := range o.Result.FailedAt {
		c := out[at(t)]
		c[0]++
		out[at(t)] = c
	}
	for _, t := range o.Result.ResentAt {
		c := out[at(t)]
		c[1]++
		out[at(t)] = c
	}
	return out
}

// outcomeTable is the outcomes as a Markdown table: failed / re-sent per
// leaving, and the totals.
func outcomeTable(outs []outcome, ways []string) string {
	var b strings.Builder
	cols := append(slices.Clone(ways), "between")
	b.WriteString("| server | client | " + strings.Join(cols, " | ") + " | requests | failed | re-sent | refused at GOAWAY |\n|---|---|")
	b.WriteString(strings.Repeat("---|", len(cols)+4) + "\n")
	for _, o := range outs {
		by := o.byLeaving()
		fmt.Fprintf(&b, "| %s | %s |", o.Contender, o.Shape)
		for _, c := range cols {
			fmt.Fprintf(&b, " %d / %d |", by[c][0], by[c][1])
		}
		fmt.Fprintf(&b, " %d | %d | %d | %d |\n", o.Result.Total, o.Result.Failed, o.Result.Resent, len(o.Result.RefusedAt))
		if r := o.Result; r.LateFailed+r.LateResent > 0 {
			fmt.Fprintf(&b, "| | of them, written after the server had closed the connection |%s | %d | %d | |\n",
				strings.Repeat(" |", len(cols)), r.LateFailed, r.LateResent)
		}
	}
	return b.String()
}

// TestTrafficBesideControls is the suite's proof against what users would
// write instead of lameduck, in the same run: each contender (the chart as
// shipped; a hand-written lame duck; Go's default server with a native
// `preStop: sleep`; Go's default server alone) takes load from every
// client shape at once (clientShapes: fresh connections, an HTTP/1.1
// keep-alive pool and HTTP/2 over h2c through the Service's ClusterIP;
// nginx proxying to the ClusterIP; Traefik routing to the endpoints;
// controlRate each) while
// its pods leave in every way a cluster makes them leave (leaveEveryWay).
// Two contenders run at a time, each in a namespace of its own. It is the
// suite's last test (go test runs a package's tests in the order of its
// files' names): under the README's test command every other module
// compiles and runs its -race tests beside the suite's first minutes, and
// this test's 800 requests a second must measure the servers, not a
// machine stalled by that work.
//
// lameduck must fail no request and make no client re-send one, for every
// shape and every leaving, and its pods must each exit 0 by itself, timed
// from their own logs. The controls together must fail or re-send more
// than zero — the test can see a bad drain — and their counts are
// reported, never judged one by one: they vary from run to run.
func TestTrafficBesideControls(t *testing.T) {
	needCluster(t)
	// Waited for before any contender deploys (CI may still be building
	// Traefik beside the first tests).
	loadTraefikImage(t)
	var mu sync.Mutex
	var outcomes []outcome
	cs := contenders()
	for _, group := range [][]contender{{cs[0], cs[1]}, {cs[2], cs[3]}} {
		t.Run(group[0].name+" beside "+group[1].name, func(t *testing.T) {
			for _, c := range group {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					outs := runContender(t, c, controlRate, (*env).leaveEveryWay)
					mu.Lock()
					outcomes = append(outcomes, outs...)
					mu.Unlock()
				})
			}
		})
	}
	if t.Failed() && len(outcomes) < len(cs)*len(clientShapes) {
		return
	}
	slices.SortStableFunc(outcomes, func(a, b outcome) int {
		return slices.IndexFunc(cs, func(c contender) bool { return c.name == a.Contender }) -
			slices.IndexFunc(cs, func(c contender) bool { return c.name == b.Contender })
	})
	t.Logf("failed / re-sent requests by the leaving they were sent in, %d requests a second per client shape:\n%s", controlRate, outcomeTable(outcomes, leavings))
	controls := 0
	for _, o := range outcomes {
		if o.Contender != cs[0].name {
			controls += o.Result.Failed + o.Result.Resent
		}
	}
	if controls == 0 {
		t.Errorf("no control failed or re-sent a request, in every shape and every leaving: the test cannot see a bad drain")
	}
}

// runContender deploys c, runs every client shape's load at rate requests
// a second while leave makes its pods leave, and judges lameduck's
// outcome.
func runContender(t testing.TB, c contender, rate int, leave func(e *env, name string) ([]leaving, int)) []outcome {
	e := newEnv(t, c.slug)
	name := c.deploy(e)
	url := e.serviceURL(name)
	pods := e.watchPods(c.container)
	logs := e.followLogs(c.container)
	routes := e.watchRoutes(name)
	// Every proxy is up, and routing, before any load starts: Traefik's
	// start (its image imported, its pod started) beside a running load
	// once stalled the node for seconds, and both contenders' loads with it.
	targets := make([]string, len(clientShapes))
	var proxy *nginxProxy
	for i, s := range clientShapes {
		targets[i] = url
		switch s {
		case nginxUpstream:
			proxy = startNginx(t, url)
			targets[i] = proxy.URL
		case traefikEndpoints:
			targets[i] = e.startTraefik(name)
		}
	}
	loads := make([]*load, len(clientShapes))
	for i, s := range clientShapes {
		loads[i] = startShapedLoad(targets[i], rate, s)
	}
	time.Sleep(2 * time.Second) // load before the first leaving
	ls, stopped := leave(e, name)
	time.Sleep(2 * time.Second) // load after the last old pod left
	var out []outcome
	for i, s := range clientShapes {
		r := loads[i].finish()
		o := outcome{Contender: c.name, Shape: s, Result: r, Leavings: ls}
		out = append(out, o)
		t.Logf("%s, %s: %s; by leaving (failed, re-sent): %v; examples: %q", c.name, s, r, o.byLeaving(), r.Examples)
		if s == nginxUpstream && r.Failed > 0 {
			t.Logf("%s: nginx's error log says: %q", c.name, proxy.errors(5))
		}
		// A load that ran sends rate requests a second for the 20 s or
		// more the leavings take. Judged for lameduck, whose zero must
		// not be vacuous. A control's hung requests (a 10 s timeout
		// each) can hold every one of the load's loadWorkers, and the
		// pacer then waits: its short count is the control's bad drain
		// showing, logged, while the controls' sum below keeps the test
		// able to see a bad drain.
		if r.Total < rate*20 {
			if c.lameduck {
				t.Errorf("%s: only %d requests sent: the load did not run", s, r.Total)
			} else {
				t.Logf("%s, %s: only %d requests sent, %d of them timed out: the load waited on the control's hung requests", c.name, s, r.Total, r.Kinds["timeout"])
			}
		}
		// A request the client wrote on a connection its server had
		// closed before (finConn) never reached a server: counted and
		// logged, not held against the server (HTTP/1.1's idle-close
		// race, widened by a stalled client).
		if c.lameduck && (r.Failed-r.LateFailed != 0 || r.Resent-r.LateResent != 0) {
			t.Errorf("%s, %s: %d requests failed and %d were re-sent (%d and %d of them written after the server closed the connection), want 0 and 0 besides those; by leaving: %v; examples: %q",
				c.name, s, r.Failed, r.Resent, r.LateFailed, r.LateResent, o.byLeaving(), r.Examples)
		}
	}
	lives := pods.lives()
	logLives(t, lives)
	t.Logf("%s: %s", c.name, routes.summary())
	for _, s := range routes.staleRoutes(lives) {
		t.Logf("%s: kube-proxy routed to an exited pod: %s", c.name, s)
	}
	if c.lameduck {
		checkExits(t, lives, logs, stopped, 0)
	}
	return out
}

package kube_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// routeEvery is how often watchRoutes reads kube-proxy's rules.
const routeEvery = 500 * time.Millisecond

// routeSample is which pod IPs a Service's ClusterIP was sent to at one
// moment, as kube-proxy's iptables rules said.
type routeSample struct {
	At  time.Time
	IPs []string
}

// routeWatch reads the dataplane's view of one Service every routeEvery:
// the pod IPs that `iptables-save -t nat` shows its KUBE-SVC chain
// jumping to (kube-proxy comments each jump "ns/svc:port -> IP:port").
// Beside the API's view (podWatch), it tells when kube-proxy still sent
// new connections to a pod that had exited: no server can answer those,
// whatever its drain.
type routeWatch struct {
	mu      sync.Mutex
	samples []routeSample
	failed  int   // reads of the rules that failed
	lastErr error // the last such failure
	stop    context.CancelFunc
	done    chan struct{}
}

// watchRoutes samples the rules of the Service name of e's namespace
// until the test ends.
func (e *env) watchRoutes(name string) *routeWatch {
	ctx, cancel := context.WithCancel(context.Background())
	rw := &routeWatch{stop: cancel, done: make(chan struct{})}
	prefix := fmt.Sprintf(`"%s/%s:`, e.ns, name)
	go func() {
		defer close(rw.done)
		tick := time.NewTicker(routeEvery)
		defer tick.Stop()
		for {
			at := time.Now()
			out, err := exec.CommandContext(ctx, "iptables-save", "-t", "nat").Output()
			if ctx.Err() != nil {
				return
			}
			rw.mu.Lock()
			if err != nil {
				rw.failed++
				rw.lastErr = err
			} else {
				rw.samples = append(rw.samples, routeSample{At: at, IPs: serviceRoutes(string(out), prefix)})
			}
			rw.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	e.t.Cleanup(rw.close)
	return rw
}

func (rw *routeWatch) close() { rw.stop(); <-rw.done }

// serviceRoutes is the sorted pod IPs that the KUBE-SVC rules commented
// with prefix (`"ns/svc:`) jump to.
func serviceRoutes(rules, prefix string) []string {
	var ips []string
	for line := range strings.Lines(rules) {
		if !strings.HasPrefix(line, "-A KUBE-SVC-") {
			continue
		}
		_, comment, ok := strings.Cut(line, prefix)
		if !ok {
			continue
		}
		_, to, ok := strings.Cut(comment, " -> ")
		if !ok {
			continue
		}
		to, _, _ = strings.Cut(to, `"`)
		ip, _, _ := strings.Cut(to, ":")
		if !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	slices.Sort(ips)
	return ips
}

// staleRoute is a span in which kube-proxy's rules still sent new
// connections to a pod that had already exited.
type staleRoute struct {
	Pod, IP  string
	Exited   time.Time // the container's finishedAt (whole seconds)
	From, To time.Time // the first and last sample that still routed to it
}

// staleRoutes finds, in the samples, every span in which the rules routed
// to the IP of a pod that had exited more than a second before (finishedAt
// has whole seconds) while no other pod that had not yet exited held the
// IP (host-local IPAM hands an address out again once its range wraps).
func (rw *routeWatch) staleRoutes(lives []podLife) []staleRoute {
	rw.mu.Lock()
	samples := slices.Clone(rw.samples)
	rw.mu.Unlock()
	var out []staleRoute
	for _, l := range lives {
		if l.IP == "" || l.Exited.IsZero() {
			continue
		}
		var cur *staleRoute
		for _, s := range samples {
			if s.At.Before(l.Exited.Add(time.Second)) || !slices.Contains(s.IPs, l.IP) || heldBy(lives, l, s.At) {
				cur = nil
				continue
			}
			if cur == nil {
				out = append(out, staleRoute{Pod: l.Name, IP: l.IP, Exited: l.Exited, From: s.At, To: s.At})
				cur = &out[len(out)-1]
			}
			cur.To = s.At
		}
	}
	slices.SortFunc(out, func(a, b staleRoute) int { return a.From.Compare(b.From) })
	return out
}

// heldBy reports whether a pod other than l, not yet exited at t, holds
// l's IP.
func heldBy(lives []podLife, l podLife, t time.Time) bool {
	return slices.ContainsFunc(lives, func(o podLife) bool {
		return o.Name != l.Name && o.IP == l.IP && (o.Exited.IsZero() || o.Exited.After(t))
	})
}

// routedToExited reports whether a connection opened at t may have been
// sent to an exited pod: t lies in a stale span, widened by one sampling
// period on each side.
func routedToExited(stale []staleRoute, t time.Time) bool {
	return slices.ContainsFunc(stale, func(s staleRoute) bool {
		return !t.Before(s.From.Add(-routeEvery)) && !t.After(s.To.Add(routeEvery))
	})
}

// String tells the span in a line.
func (s staleRoute) String() string {
	return fmt.Sprintf("%s (%s) exited %s, still routed from %s to %s (%.1fs)", s.Pod, s.IP, s.Exited.Format("15:04:05"),
		s.From.Format("15:04:05.000"), s.To.Format("15:04:05.000"), s.To.Sub(s.From).Seconds()+routeEvery.Seconds())
}

// summary is how many samples were read and what they saw, for the log.
func (rw *routeWatch) summary() string {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	changes := 0
	for i := 1; i < len(rw.samples); i++ {
		if !slices.Equal(rw.samples[i].IPs, rw.samples[i-1].IPs) {
			changes++
		}
	}
	s := fmt.Sprintf("%d reads of kube-proxy's rules, %d changes of the Service's endpoints", len(rw.samples), changes)
	if rw.failed > 0 {
		s += fmt.Sprintf(", %d reads failed (last: %v)", rw.failed, rw.lastErr)
	}
	return s
}

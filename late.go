package lameduck

import (
	"fmt"
	"time"
)

// A routing layer that follows the EndpointSlice stops sending new
// requests to a terminating pod within a second or two of the deletion
// (kube-proxy, ingress controllers that honour the terminating condition).
// Requests that still arrive in the last second of a window longer than
// routerReaction mean the layer in front did not take the pod out: a proxy
// or load balancer that ignores terminating endpoints
// (https://github.com/traefik/traefik/issues/13287 is one), or a pod that
// was its Service's last serving endpoint.
const (
	routerReaction = 2 * time.Second // windows this short or shorter are not judged
	lateSpan       = time.Second     // the end of the window that is judged
)

// armLate sets, at the signal and before arrivals start counting, the
// offset from which an arrival is late: lateSpan before the window's end
// (in idle mode, before the idle drain's bound: a window that ends because
// traffic went idle has no late arrival), and never earlier than
// routerReaction after the signal. It arms nothing for a window of
// routerReaction or less, or one skipped because the pod was never ready.
func (l *Lifecycle) armLate(skipped bool) {
	w := l.cfg.window()
	if l.cfg.DrainMode == DrainIdle {
		w = l.cfg.DrainTimeout
	}
	if skipped || w <= routerReaction {
		return
	}
	l.track.lateFrom.Store(int64(l.track.now() + max(w-lateSpan, routerReaction)))
}

// noteLate counts an arrival at offset now if it is late (see armLate). It
// runs only from the signal on; it allocates nothing.
func (t *tracker) noteLate(now time.Duration) {
	if from := t.lateFrom.Load(); from == 0 || int64(now) < from {
		return
	}
	t.lateN.Add(1)
	for {
		last := t.lateLast.Load()
		if int64(now) <= last || t.lateLast.CompareAndSwap(last, int64(now)) {
			return
		}
	}
}

// logLateArrivals says, once the window has ended, how many requests
// arrived in its last second and how long after the signal the last one
// came, and what that means: the routing layer in front still sent to the
// pod after it began terminating. It logs nothing when none did, or when
// the window was not judged (see armLate).
func (l *Lifecycle) logLateArrivals(start time.Time) {
	t := l.track
	n := t.lateN.Load()
	if n == 0 {
		return
	}
	last := t.base.Add(time.Duration(t.lateLast.Load())).Sub(start).Round(time.Millisecond)
	from := t.base.Add(time.Duration(t.lateFrom.Load())).Sub(start).Round(time.Millisecond)
	where := "in the last second of the lame-duck window"
	if l.cfg.DrainMode == DrainIdle {
		where = "in the last second before the idle drain's bound"
	}
	l.log.Warn(fmt.Sprintf("lameduck: %d request(s) arrived %s, %s or more after the shutdown signal (the last %s after it): "+
		"the routing layer in front kept sending to the pod after it began terminating — a proxy or load balancer that does not "+
		"follow the EndpointSlice's terminating endpoints (kube-proxy stops within a second or two), or a pod that was its "+
		"Service's last serving endpoint; check the router's Kubernetes provider (docs/probes-and-shutdown.md, \"A router that ignores terminating endpoints\")",
		n, where, from, last),
		"late_requests", n, "first_counted_after_signal", from.String(), "last_after_signal", last.String())
}

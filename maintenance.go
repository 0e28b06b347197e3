package lameduck

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lameduck/lameduck/health"
)

// pathMaintenance is where the maintenance switch is served when
// Config.Maintenance is set: POST pathMaintenance+"/on" and "/off" turn it,
// GET (or HEAD) pathMaintenance says which way it is
// (docs/probes-and-shutdown.md, "The maintenance switch").
const pathMaintenance = "/maintenance"

// maintenance is the switch's state. The zero value is off. Its methods
// are safe for concurrent use; mu is never held across I/O or a callback.
type maintenance struct {
	mu    sync.Mutex
	on    bool      // guarded by mu
	since time.Time // guarded by mu: when it was turned on (the Lifecycle's clock)
	// refused and refusedLogAt bound the log lines of refused calls, as
	// for /prestop.
	refused, refusedLogAt int64 // guarded by mu
}

// Maintenance reports whether the maintenance switch holds the pod out of
// rotation, and since when (on the Lifecycle's clock; the zero time when
// off). While it is on and the pod is serving, readiness answers 503
// {"status":"maintenance"} without running a check; it never starts the
// shutdown sequence, and /healthz is unaffected. It is safe for concurrent
// use; metrics integrations read it at each collection.
func (l *Lifecycle) Maintenance() (on bool, since time.Time) {
	l.maint.mu.Lock()
	defer l.maint.mu.Unlock()
	return l.maint.on, l.maint.since
}

// isMaintenancePath reports whether p is one of the switch's paths.
func isMaintenancePath(p string) bool {
	return p == pathMaintenance || p == pathMaintenance+"/on" || p == pathMaintenance+"/off"
}

// serveMaintenance is the maintenance switch, served where the preStop hook
// would be (probeHandler.maintenance): behind the token when one is set.
// Its steps: check the token (401, bare, changing nothing); GET or HEAD
// on pathMaintenance answers the state; POST on /on or /off turns the
// switch, logs the change once (a call that changes nothing logs nothing),
// and answers the state; from the shutdown signal on, a POST gets 409
// {"status":"draining"} and changes nothing, since readiness never turns
// green again once the drain has begun. Any other method gets 405.
func (h *probeHandler) serveMaintenance(w http.ResponseWriter, r *http.Request) {
	l := h.l
	if l.refuseToken(w, r, l.refusedMaintenance) {
		return
	}
	p := r.URL.Path
	switch {
	case p == pathMaintenance && (r.Method == http.MethodGet || r.Method == http.MethodHead):
	case p == pathMaintenance:
		w.Header().Set("Allow", "GET, HEAD")
		health.Write(w, r, h.info, health.Report{Status: "method not allowed", Code: http.StatusMethodNotAllowed})
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", "POST")
		health.Write(w, r, h.info, health.Report{Status: "method not allowed", Code: http.StatusMethodNotAllowed})
		return
	case l.Phase() >= PhaseDraining:
		rep := l.report(health.StatusDraining)
		rep.Code = http.StatusConflict
		health.Write(w, r, h.info, rep)
		return
	default:
		l.setMaintenance(p == pathMaintenance+"/on", r.RemoteAddr)
	}
	on, since := l.Maintenance()
	rep := l.report(health.StatusOK)
	rep.Code = http.StatusOK
	rep.Fields["maintenance"] = on
	if on {
		rep.Status = health.StatusMaintenance
		rep.Fields["since"] = since.UTC().Format(time.RFC3339Nano)
	}
	health.Write(w, r, h.info, rep)
}

// setMaintenance turns the switch and logs the change, once: turning it the
// way it already is changes nothing and logs nothing.
func (l *Lifecycle) setMaintenance(on bool, remote string) {
	now := l.clock.Now()
	m := &l.maint
	m.mu.Lock()
	was, since := m.on, m.since
	if was != on {
		m.on = on
		m.since = time.Time{}
		if on {
			m.since = now
		}
	}
	m.mu.Unlock()
	switch {
	case was == on:
	case on:
		l.log.Info("lameduck: maintenance on — /readyz now 503 maintenance, so the pod leaves its Services' endpoints; nothing drains and /healthz stays 200; POST "+
			pathMaintenance+"/off brings it back", "remote", remote, "phase", l.Phase().String())
	default:
		l.log.Info(fmt.Sprintf("lameduck: maintenance off after %s — /readyz answers its checks again", now.Sub(since).Round(time.Millisecond)),
			"remote", remote, "phase", l.Phase().String())
	}
}

// refusedMaintenance logs a refused call of the switch at most once per
// refusedLogEvery, with its source and how many were refused since the
// last line; never the header.
func (l *Lifecycle) refusedMaintenance(r *http.Request) {
	now := l.clock.Now().UnixNano()
	m := &l.maint
	m.mu.Lock()
	m.refused++
	if m.refusedLogAt != 0 && now-m.refusedLogAt < int64(refusedLogEvery) {
		m.mu.Unlock()
		return
	}
	n := m.refused
	m.refused, m.refusedLogAt = 0, now
	m.mu.Unlock()
	l.log.Warn("lameduck: "+r.Method+" "+r.URL.Path+" refused: missing or wrong "+preStopTokenHeader+" header; nothing changed "+
		"(such refusals are logged at most once a minute)", "remote", r.RemoteAddr, "refused", n)
}

// checkMaintenanceIsGuarded refuses the maintenance switch on the
// application's own listener without a token, as checkPreStopIsGuarded
// refuses the preStop hook: anyone who reaches the port could take every
// replica out of rotation.
func checkMaintenanceIsGuarded(c *Config, src map[string]string) []error {
	return refuseUnguarded(c, src, "MAINTENANCE", c.Maintenance,
		"the maintenance switch would be served on the application's own listener, where anyone who reaches the port can take the pod out of rotation",
		"the")
}

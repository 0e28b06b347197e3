package lameduck

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/lameduck/lameduck/health"
)

// The paths the probes answer on. /readyz/<name> is reserved for one
// check's answer (the Kubernetes API server's convention).
const (
	PathLiveness  = "/healthz"
	PathReadiness = "/readyz"
	PathStartup   = "/startupz"
	PathPreStop   = "/prestop"
)

// PreStopTokenHeader carries Config.PreStopToken on GET /prestop; in a pod
// spec it goes in lifecycle.preStop.httpGet.httpHeaders.
const PreStopTokenHeader = "X-Lameduck-Token"

const reasonPreStop = "preStop hook"

func (l *Lifecycle) isProbePath(p string) bool {
	switch p {
	case PathLiveness, PathReadiness, PathStartup:
		return true
	case PathPreStop:
		return l.cfg.PreStop
	}
	return strings.HasPrefix(p, PathReadiness+"/")
}

// ProbeHandler returns the handler that answers the probes, for an
// application that mounts them itself (on a router of its own, say). It
// serves:
//
//   - GET /healthz (liveness): always 200 {"status":"ok",...} while the
//     process serves, including through the drain: a liveness failure would
//     make the kubelet kill the pod mid-drain (the kubelet restarts a
//     container whose liveness probe fails:
//     https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/).
//   - GET /readyz (readiness): 503 {"status":"starting"} during boot; while
//     serving, 200 {"status":"ok"}, 200 {"status":"degraded"} when a
//     non-critical check fails, 503 {"status":"failed"} when a critical
//     check or a gate fails, with a "checks" map; 503 {"status":"draining"}
//     from the shutdown signal on, for good, without running any check.
//     /readyz/<check> answers for one check; ?verbose gives a text report,
//     ?exclude=<check> leaves checks out, and Accept:
//     application/health+json the IETF health-check format.
//   - GET /startupz (startup): 503 {"status":"starting"} until every startup
//     task has returned, then 200 {"status":"ok"}.
//   - GET /prestop (GET only), when Config.PreStop is set: starts the shutdown sequence
//     and answers 200 {"status":"draining"} when the lame-duck window has
//     passed; 401 without the right X-Lameduck-Token when PreStopToken is
//     set. Without PreStop, 404.
//
// Every body also carries "version", "commit", "phase" and Config.Fields.
// Methods other than GET and HEAD get 405. Other paths get 404. Servers
// registered with AddServer already serve these paths; ProbeHandler is for
// mounting them elsewhere.
func (l *Lifecycle) ProbeHandler() http.Handler { return l.probes }

// ProbeAnswer answers a probe in the Lifecycle's place, for code that knows
// more than the Lifecycle does about the process's health: the worker
// package's consume loops (a stalled loop fails liveness; a superseded
// runner is not ready). probe is PathLiveness or PathReadiness (for
// /readyz/<check> too); phase is the Lifecycle's phase at the probe. It
// returns the report to render and true, or false to let the Lifecycle
// answer as [Lifecycle.ProbeHandler] documents. It is called on every such
// probe, concurrently, and must only read memory and return at once.
// A "phase" member is added to the report's Fields unless it sets one.
type ProbeAnswer func(probe string, phase Phase) (rep health.Report, answered bool)

// AnswerProbes installs fn, which is asked first on every liveness and
// readiness probe (see [ProbeAnswer]). There is one such function per
// Lifecycle: a second call replaces the first. It returns ErrAlreadyRunning
// once Run has started. Safe for concurrent use.
func (l *Lifecycle) AnswerProbes(fn ProbeAnswer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return ErrAlreadyRunning
	}
	l.answer.Store(&fn)
	return nil
}

// answered asks the ProbeAnswer, if any.
func (l *Lifecycle) answered(probe string) (health.Report, bool) {
	fn := l.answer.Load()
	if fn == nil || *fn == nil {
		return health.Report{}, false
	}
	p := l.Phase()
	rep, ok := (*fn)(probe, p)
	if ok {
		if rep.Fields == nil {
			rep.Fields = map[string]any{}
		}
		if _, set := rep.Fields["phase"]; !set {
			rep.Fields["phase"] = p.String()
		}
	}
	return rep, ok
}

func (l *Lifecycle) newProbeHandler() http.Handler {
	live := health.Handler(&l.info, func(*http.Request) health.Report {
		if rep, ok := l.answered(PathLiveness); ok {
			return rep
		}
		return l.report(health.StatusOK)
	})
	startup := health.Handler(&l.info, func(*http.Request) health.Report {
		if l.events.StartupDone.Fired() {
			return l.report(health.StatusOK)
		}
		return l.report(health.StatusStarting)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == PathLiveness:
			live.ServeHTTP(w, r)
		case p == PathReadiness || strings.HasPrefix(p, PathReadiness+"/"):
			l.serveReadiness(w, r, strings.TrimPrefix(strings.TrimPrefix(p, PathReadiness), "/"))
		case p == PathStartup:
			startup.ServeHTTP(w, r)
		case p == PathPreStop && l.cfg.PreStop:
			l.servePreStop(w, r)
		default:
			health.Write(w, r, &l.info, health.Report{Status: "not found", Code: http.StatusNotFound})
		}
	})
}

// serveReadiness answers /readyz and /readyz/<check>: the phase's answer
// while starting or draining, without consulting any check or gate; while
// serving, the checks' and gates' answer, with the Kubernetes
// API server's conventions (?verbose, ?exclude=) and, on Accept:
// application/health+json, the IETF draft's format.
func (l *Lifecycle) serveReadiness(w http.ResponseWriter, r *http.Request, check string) {
	if !health.AllowedMethod(w, r, &l.info) {
		return
	}
	if rep, ok := l.answered(PathReadiness); ok {
		health.WriteNegotiated(w, r, &l.info, rep)
		return
	}
	switch p := l.Phase(); p {
	case PhaseServing:
		l.checks.ServeReadiness(w, r, &l.info, check, map[string]any{"phase": p.String()})
	case PhaseStarting:
		health.WriteNegotiated(w, r, &l.info, l.report(health.StatusStarting))
	default:
		health.WriteNegotiated(w, r, &l.info, l.report(health.StatusDraining))
	}
}

func (l *Lifecycle) report(s health.Status) health.Report {
	return health.Report{Status: s, Fields: map[string]any{"phase": l.Phase().String()}}
}

// servePreStop is the preStop hook over HTTP (docs/probes-and-shutdown.md,
// "The preStop hook over HTTP"; hooks:
// https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/):
// it starts the sequence exactly as SIGTERM does and holds the kubelet until
// the window has passed, so the SIGTERM that follows adds no second window.
func (l *Lifecycle) servePreStop(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		// Only GET, the kubelet's httpGet: a HEAD from a monitor must not
		// drain the pod.
		w.Header().Set("Allow", "GET")
		health.Write(w, r, &l.info, health.Report{Status: "method not allowed", Code: http.StatusMethodNotAllowed})
		return
	}
	if tok := l.cfg.PreStopToken; tok != "" &&
		subtle.ConstantTimeCompare([]byte(r.Header.Get(PreStopTokenHeader)), []byte(tok)) != 1 {
		l.log.Warn("lameduck: GET /prestop refused: missing or wrong "+PreStopTokenHeader+" header; nothing drained",
			"remote", r.RemoteAddr)
		health.Write(w, r, &l.info, health.Report{Status: "unauthorized", Code: http.StatusUnauthorized})
		return
	}
	l.begin(reasonPreStop, false)
	select {
	case <-l.events.WindowEnded.Done():
		rep := l.report(health.StatusDraining)
		rep.Code = http.StatusOK
		rep.Fields["window"] = l.window().String()
		health.Write(w, r, &l.info, rep)
	case <-r.Context().Done():
	}
}

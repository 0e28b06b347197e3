package lameduck

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lameduck/lameduck/health"
)

// The default paths the probes answer on (their settings' defaults:
// [Config.LivenessPaths], ReadinessPath, StartupPath and PreStopPath rename
// them, and the resolved Config, from Lifecycle.Config, holds the paths in
// effect). /readyz/<name> is reserved for one check's answer (the
// Kubernetes API server's convention).
const (
	pathLiveness  = "/healthz"
	pathReadiness = "/readyz"
	pathStartup   = "/startupz"
	pathPreStop   = "/prestop"
)

// pathLivez answers liveness too, by default, as on the Kubernetes API
// server.
const pathLivez = "/livez"

// preStopTokenHeader carries Config.PreStopToken on GET /prestop and the
// maintenance switch's calls; in a pod spec it goes in
// lifecycle.preStop.httpGet.httpHeaders.
const preStopTokenHeader = "X-Lameduck-Token"

const reasonPreStop = "preStop hook"

// refusedLogEvery bounds the log lines of refused /prestop calls, so a
// flood of them cannot flood the log.
const refusedLogEvery = time.Minute

// probeHandler answers the probes on one kind of listener: one that also
// serves the application (shared), or the probe-only listener of
// Config.ProbeAddr. They differ in what a body may show and in whether the
// preStop hook needs a token; see docs/security.md.
type probeHandler struct {
	l       *Lifecycle
	info    *health.Info // HideDetails set on a shared listener (CheckDetailsAuto)
	prestop bool         // serves the hook here
	// maintenance serves the maintenance switch here: on the same rules
	// as the hook (maintenance.go).
	maintenance bool
	live        http.Handler
	startup     http.Handler
}

func (l *Lifecycle) newProbeHandler(shared bool) *probeHandler {
	c := &l.cfg
	info := &health.Info{Version: c.Version, Commit: c.Commit, Fields: c.Fields,
		HideDetails: c.CheckDetails == CheckDetailsHide || (shared && c.CheckDetails != CheckDetailsShow)}
	h := &probeHandler{
		l:    l,
		info: info,
		// On a shared listener only with a token; New refuses the hook
		// without one unless ProbeAddr gives it a listener of its own.
		prestop:     c.PreStop && (!shared || c.PreStopToken != ""),
		maintenance: c.Maintenance && (!shared || c.PreStopToken != ""),
	}
	h.live = health.Handler(info, func(*http.Request) health.Report {
		if rep, ok := l.answered(true); ok {
			return rep
		}
		return l.report(health.StatusOK)
	})
	h.startup = health.Handler(info, func(*http.Request) health.Report {
		if l.events.StartupDone.Fired() {
			return l.report(health.StatusOK)
		}
		return l.report(health.StatusStarting)
	})
	return h
}

// isProbePath reports whether the shared handler answers p. It allocates
// nothing: it runs on every application request.
func (h *probeHandler) isProbePath(p string) bool {
	c := &h.l.cfg
	switch {
	case p == c.ReadinessPath, p == c.StartupPath:
		return true
	case p == c.PreStopPath:
		return h.prestop
	case h.maintenance && isMaintenancePath(p):
		return true
	case len(p) > len(c.ReadinessPath) && p[len(c.ReadinessPath)] == '/' && strings.HasPrefix(p, c.ReadinessPath):
		return true
	}
	return slices.Contains(c.LivenessPaths, p)
}

// ProbeHandler returns the handler that answers the probes, for an
// application that mounts them itself (on a router of its own, say). It
// serves (at the paths Config renames):
//
//   - GET /healthz and /livez (liveness): always 200 {"status":"ok",...}
//     while the process serves, including through the drain: a liveness
//     failure would make the kubelet kill the pod mid-drain (see
//     docs/probes-and-shutdown.md).
//   - GET /readyz (readiness): 503 {"status":"starting"} during boot; while
//     serving, 200 {"status":"ok"}, 200 {"status":"degraded"} when a
//     non-critical check fails, 503 {"status":"failed"} when a critical
//     check or a gate fails, with a "checks" map; 503 {"status":"draining"}
//     from the shutdown signal on, for good, without running any check
//     (with Config.NotReadyAt "teardown": 200 {"status":"draining",
//     "not_ready_at":"teardown"} through the lame-duck window, 503 from
//     the teardown on).
//     /readyz/<check> answers for one check; ?verbose gives a text report,
//     ?exclude=<check> leaves checks out, and Accept:
//     application/health+json the IETF health-check format.
//   - GET /startupz (startup): 503 {"status":"starting"} until every startup
//     task has returned, then 200 {"status":"ok"}.
//   - GET /prestop (GET only), when Config.PreStop is set and a
//     PreStopToken is configured: starts the shutdown sequence and answers
//     200 {"status":"draining"} when the lame-duck window has passed; 401
//     without the right X-Lameduck-Token header, draining nothing. Without
//     PreStop, or without a token (the hook is then served on the
//     ProbeAddr listener alone), the path is not a probe path.
//   - POST /maintenance/on and /maintenance/off, GET /maintenance, when
//     Config.Maintenance is set, on the same rules as /prestop: the
//     maintenance switch (see [Lifecycle.Maintenance]); while it is on,
//     /readyz answers 503 {"status":"maintenance"} and nothing drains.
//
// Every body but a refused /prestop or /maintenance call's (a bare
// {"status":"unauthorized"}) also carries "version", "commit", "phase" and
// Config.Fields. Methods other than GET and HEAD get 405. Other paths get
// 404. Servers registered with AddServer already serve these paths;
// ProbeHandler is for mounting them elsewhere.
//
// The handler is the one of a listener that also serves the application:
// unless Config.CheckDetails is "show", bodies carry check names and
// outcome words only, never error text (docs/security.md).
func (l *Lifecycle) ProbeHandler() http.Handler { return l.probes }

// ServeHTTP routes one probe request.
func (h *probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		// No probe reads a body. net/http would read what is left of one
		// after the answer, and a client trickling it in could hold the
		// connection, and so the drain, as long as it likes: end the read
		// now and close the connection after the answer.
		_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
		if r.ProtoMajor == 1 { // on HTTP/2 it would close every stream of the connection (GOAWAY)
			w.Header().Set("Connection", "close")
		}
	}
	c := &h.l.cfg
	switch p := r.URL.Path; {
	case slices.Contains(c.LivenessPaths, p):
		h.live.ServeHTTP(w, r)
	case p == c.ReadinessPath:
		h.serveReadiness(w, r, "")
	case len(p) > len(c.ReadinessPath) && p[len(c.ReadinessPath)] == '/' && strings.HasPrefix(p, c.ReadinessPath):
		h.serveReadiness(w, r, p[len(c.ReadinessPath)+1:])
	case p == c.StartupPath:
		h.startup.ServeHTTP(w, r)
	case p == c.PreStopPath && h.prestop:
		h.servePreStop(w, r)
	case h.maintenance && isMaintenancePath(p):
		h.serveMaintenance(w, r)
	default:
		health.Write(w, r, h.info, health.Report{Status: "not found", Code: http.StatusNotFound})
	}
}

// probeListenerHandler is the handler of the ProbeAddr listener: the probes,
// and Config.ProbeListenerHandler for every other path.
func (l *Lifecycle) probeListenerHandler(ph *probeHandler) http.Handler {
	probes := l.countProbes(ph)
	extra := l.cfg.ProbeListenerHandler
	if extra == nil {
		return probes
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ph.isProbePath(r.URL.Path) {
			probes.ServeHTTP(w, r)
			return
		}
		extra.ServeHTTP(w, r)
	})
}

// answered asks the extension's probe answerer (a runner's), if any: it
// answers first on every liveness and readiness probe.
func (l *Lifecycle) answered(liveness bool) (health.Report, bool) {
	if l.cfg.Extension == nil || l.cfg.Extension.Answer == nil {
		return health.Report{}, false
	}
	p := l.Phase()
	rep, ok := l.cfg.Extension.Answer(liveness, int32(p))
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

// servingFields are the envelope fields of a serving pod's readiness
// answer, made once: ServeReadiness reads them and never changes them.
var servingFields = map[string]any{"phase": PhaseServing.String()}

// serveReadiness answers /readyz and /readyz/<check>: the phase's answer
// while starting or draining, without consulting any check or gate; while
// serving, the checks' and gates' answer, with the Kubernetes API server's
// conventions (?verbose, ?exclude=) and, on Accept:
// application/health+json, the IETF draft's format.
func (h *probeHandler) serveReadiness(w http.ResponseWriter, r *http.Request, check string) {
	if !health.AllowedMethod(w, r, h.info) {
		return
	}
	l := h.l
	if rep, ok := l.answered(false); ok {
		health.WriteNegotiated(w, r, h.info, rep)
		return
	}
	switch p := l.Phase(); p {
	case PhaseServing:
		if on, since := l.Maintenance(); on {
			// The switch holds the pod out of rotation: no check runs.
			rep := l.report(health.StatusMaintenance)
			rep.Fields["since"] = since.UTC().Format(time.RFC3339Nano)
			health.WriteNegotiated(w, r, h.info, rep)
			return
		}
		l.checks.ServeReadiness(w, r, h.info, check, servingFields)
	case PhaseStarting:
		health.WriteNegotiated(w, r, h.info, l.report(health.StatusStarting))
	case PhaseDraining:
		if l.readyInWindow() {
			health.WriteNegotiated(w, r, h.info, health.Report{Status: health.StatusDraining, Code: http.StatusOK, Fields: windowReadyFields})
			return
		}
		fallthrough
	default:
		health.WriteNegotiated(w, r, h.info, l.report(health.StatusDraining))
	}
}

// windowReadyFields are the envelope fields of readiness in the window
// under NotReadyAtTeardown, made once and never changed.
var windowReadyFields = map[string]any{"phase": PhaseDraining.String(), "not_ready_at": NotReadyAtTeardown}

// readyInWindow reports whether /readyz answers 200 in the lame-duck
// window: NotReadyAtTeardown, on a server (a runner's readiness turns 503
// at the signal: it takes no traffic, and says it takes no new job).
func (l *Lifecycle) readyInWindow() bool {
	return l.cfg.NotReadyAt == NotReadyAtTeardown && l.cfg.Extension == nil
}

func (l *Lifecycle) report(s health.Status) health.Report {
	return health.Report{Status: s, Fields: map[string]any{"phase": l.Phase().String()}}
}

// unauthorized is the whole answer to a refused /prestop or /maintenance
// call: no build, no fields, nothing computed per call.
const unauthorized = `{"status":"unauthorized"}` + "\n"

// refuseToken checks r's preStopTokenHeader when a token is set. A call
// without the token is logged by refused and answered 401, bare, and
// refuseToken reports true: the caller changes nothing and returns.
func (l *Lifecycle) refuseToken(w http.ResponseWriter, r *http.Request, refused func(*http.Request)) bool {
	if !l.tokenSet {
		return false
	}
	// Compare digests: constant time, whatever the lengths.
	got := sha256.Sum256([]byte(r.Header.Get(preStopTokenHeader)))
	if subtle.ConstantTimeCompare(got[:], l.tokenSum[:]) == 1 {
		return false
	}
	refused(r)
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("WWW-Authenticate", preStopTokenHeader)
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = io.WriteString(w, unauthorized)
	return true
}

// servePreStop is the preStop hook over HTTP (docs/probes-and-shutdown.md,
// "The preStop hook over HTTP"; hooks:
// https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/):
// it starts the sequence exactly as SIGTERM does and holds the kubelet until
// the window has passed, so the SIGTERM that follows adds no second window.
func (h *probeHandler) servePreStop(w http.ResponseWriter, r *http.Request) {
	l := h.l
	if r.Method != http.MethodGet {
		// Only GET, the kubelet's httpGet: a HEAD from a monitor must not
		// drain the pod.
		w.Header().Set("Allow", "GET")
		health.Write(w, r, h.info, health.Report{Status: "method not allowed", Code: http.StatusMethodNotAllowed})
		return
	}
	if l.refuseToken(w, r, l.refusedPreStop) {
		return
	}
	l.begin(reasonPreStop, false)
	select {
	case <-l.events.WindowEnded.Done():
		rep := l.report(health.StatusDraining)
		rep.Code = http.StatusOK
		rep.Fields["window"] = l.window().String()
		health.Write(w, r, h.info, rep)
	case <-r.Context().Done():
	}
}

// refusedPreStop logs a refused /prestop call, at most once per
// refusedLogEvery (on the Lifecycle's clock), with its source address and
// how many were refused since the last line. It never logs the header.
func (l *Lifecycle) refusedPreStop(r *http.Request) {
	n := l.refused.Add(1)
	now := l.clock.Now().UnixNano()
	last := l.refusedLogAt.Load()
	if last != 0 && now-last < int64(refusedLogEvery) || !l.refusedLogAt.CompareAndSwap(last, now) {
		return
	}
	n = l.refused.Swap(0)
	l.log.Warn("lameduck: GET "+l.cfg.PreStopPath+" refused: missing or wrong "+preStopTokenHeader+" header; nothing drained "+
		"(such refusals are logged at most once a minute)", "remote", r.RemoteAddr, "refused", n)
}

// Timeouts of the probe-only listener (Config.ProbeAddr), against clients
// that hold connections open by sending slowly (slowloris) or reading
// slowly. The read and write bounds leave room for the longest answer:
// GET /prestop, held until the lame-duck window has passed.
const (
	probeReadHeaderTimeout = 5 * time.Second
	probeIdleTimeout       = 60 * time.Second
	probeMaxHeaderBytes    = 16 << 10
	// probeAnswerSlack is added to the longest window for ReadTimeout and
	// WriteTimeout; it covers a readiness probe's checks too.
	probeAnswerSlack = 30 * time.Second
	// probeShutdownGrace bounds how long the teardown waits for the probe
	// listener's connections: once the window has passed, every probe
	// answers at once, so what is still open then is a client that sends or
	// reads slowly, and it is closed.
	probeShutdownGrace = time.Second
)

// newProbeServer returns the server of the probe-only listener, with every
// timeout set (docs/security.md, "Slow clients on the servers you hand
// in").
func (l *Lifecycle) newProbeServer() *http.Server {
	answer := l.cfg.maxWindow() + probeAnswerSlack
	return &http.Server{
		Addr:              l.cfg.ProbeAddr,
		Handler:           l.probeListenerHandler(l.newProbeHandler(false)),
		ReadHeaderTimeout: probeReadHeaderTimeout,
		ReadTimeout:       answer,
		WriteTimeout:      answer,
		IdleTimeout:       probeIdleTimeout,
		MaxHeaderBytes:    probeMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(l.log.Handler(), slog.LevelDebug),
	}
}

// minTokenLen is the shortest preStop token Run accepts without a warning:
// 16 characters of a random hex string are 64 bits, out of reach of a
// guesser limited to what a 401 costs.
const minTokenLen = 16

// warnWeakToken warns, once at Run, about a preStop token short enough to
// guess. It never prints the token.
func (l *Lifecycle) warnWeakToken() {
	if n := len(l.cfg.PreStopToken); l.tokenSet && n < minTokenLen {
		l.log.Warn(fmt.Sprintf("lameduck: the preStop token is %d characters long: whoever guesses it can drain the pod; "+
			"use at least %d random characters, such as the output of `openssl rand -hex 16`", n, minTokenLen),
			"setting", l.cfg.EnvPrefix+"PRESTOP_TOKEN")
	}
}

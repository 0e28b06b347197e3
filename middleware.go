package lameduck

import (
	"context"
	"net"
	"net/http"
)

// What the middleware does with a request, by the Lifecycle's state.
const (
	stateServing   int32 = iota // track it
	stateDraining               // track it; refuse upgrades; HTTP/2 gets GOAWAY
	stateRejecting              // answer 503 Retry-After (Config.SendRetryAfter)
)

// instrument wraps srv's handler in the middleware and chains lameduck's
// ConnState and ConnContext hooks in front of srv's own.
func (l *Lifecycle) instrument(srv *http.Server) {
	srv.Handler = l.wrap(srv.Handler)
	userState := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		l.track.connState(c, st)
		if userState != nil {
			userState(c, st)
		}
	}
	userCtx := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if userCtx != nil {
			ctx = userCtx(ctx, c)
		}
		return connContext(ctx, c)
	}
}

// wrap is the request-tracking middleware, outermost on every registered
// server (before authentication and rate limits: a retried request is still
// a sign of use to the idle drain). It routes probe paths to the probes (unless they
// have their own listener) and tracks every other request as in flight.
//
// While serving, its cost is one clock read and two uncontended lock pairs
// per request, and no allocation (BenchmarkHandler). From the signal on it
// also refuses new upgrades (WebSockets) with 503, so the client retries
// elsewhere, and marks the response to every request that arrives from then
// on Connection: close: an HTTP/1 connection closes after it, and net/http
// sends GOAWAY on an HTTP/2 one. (A response to a request already in flight
// at the signal is not marked: its headers are the handler's to write; the
// connection's next request is.)
func (l *Lifecycle) wrap(app http.Handler) http.Handler {
	if app == nil {
		app = http.DefaultServeMux
	}
	mount := l.cfg.ProbeAddr == ""
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mount && l.isProbePath(r.URL.Path) {
			l.probes.ServeHTTP(w, r)
			return
		}
		if st := l.state.Load(); st != stateServing && l.refuse(w, r, st) {
			return
		}
		rec := l.track.begin(r)
		defer l.track.end(rec)
		app.ServeHTTP(w, r)
	})
}

// refuse handles a request that arrives after the signal; it reports
// whether it answered it.
func (l *Lifecycle) refuse(w http.ResponseWriter, r *http.Request, st int32) bool {
	h := w.Header()
	switch {
	case st == stateRejecting:
		h.Set("Retry-After", "1")
		h.Set("Connection", "close")
		http.Error(w, "lameduck: shutting down; retry on another instance", http.StatusServiceUnavailable)
		return true
	case r.Header.Get("Upgrade") != "":
		h.Set("Retry-After", "1")
		h.Set("Connection", "close")
		http.Error(w, "lameduck: draining; upgrade on another instance", http.StatusServiceUnavailable)
		return true
	}
	// HTTP/1: the connection closes after this response. HTTP/2: net/http
	// turns the header into a GOAWAY once the response is written.
	h.Set("Connection", "close")
	return false
}

// KeepAlive moves the idle drain's clock to now, as a request arriving
// would: call it per message from a long-lived subscription (a WebSocket)
// that should keep the pod alive while it is used. Outside DrainIdle mode it
// has no effect on the sequence. It costs one clock read and one atomic
// store; it is safe for concurrent use.
func (l *Lifecycle) KeepAlive() { l.track.touch() }

// Drain returns a channel that is closed when the lame-duck window ends and
// teardown begins. Long-lived handlers watch it to finish cleanly: a
// WebSocket sends a close frame with status 1001 (going away), a
// server-sent-event stream writes a final event and returns. A handler that
// ignores it is cut at the teardown budget and named in the log. It is the
// same channel as Events().WindowEnded.Done().
func (l *Lifecycle) Drain() <-chan struct{} { return l.events.WindowEnded.Done() }

package lameduck

import (
	"context"
	"net"
	"net/http"
	"strings"
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
		ctx = connContext(ctx, c)
		if l.cfg.MaxConnectionAge > 0 {
			ctx = l.connDeadline(ctx)
		}
		return ctx
	}
}

// wrap is the request-tracking middleware, outermost on every registered
// server (before authentication and rate limits: a retried request is still
// a sign of use to the idle drain). It routes probe paths to the probes (unless they
// have their own listener) and tracks every other request as in flight,
// deciding each request as [Lifecycle.TrackRequest] does.
//
// While serving, it takes no lock, and its cost per request is one atomic
// load of a coarse arrival clock, three atomic writes (one that publishes
// the request as in flight, two at its end: see TrackRequest) and no
// allocation (BenchmarkHandler). From the signal on it
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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := l.admit(r.URL.Path, l.state.Load() != stateServing && r.Header.Get("Upgrade") != "")
		switch {
		case v.Probe:
			l.probes.ServeHTTP(w, r)
			return
		case v.Refuse != "":
			h := w.Header()
			h.Set("Retry-After", RetryAfterSeconds)
			h.Set("Connection", "close")
			http.Error(w, v.Refuse, http.StatusServiceUnavailable)
			return
		case v.Close:
			// HTTP/1: the connection closes after this response. HTTP/2:
			// net/http turns the header into a GOAWAY once it is written.
			w.Header().Set("Connection", "close")
		}
		rec, gen := l.track.begin(r.Method, r.URL.Path, r)
		defer l.track.end(rec, gen)
		if l.cfg.MaxConnectionAge > 0 && !v.Close && connAged(r, rec.start) {
			// Config.MaxConnectionAge: as at the signal, HTTP/1 closes
			// after this response, HTTP/2 gets GOAWAY.
			w.Header().Set("Connection", "close")
		}
		app.ServeHTTP(w, r)
	})
}

// RetryAfterSeconds is the Retry-After header's value on a 503 that refuses
// a request during the shutdown (RFC 9110, section 10.2.3: a number of
// seconds): the client may retry at once, and a retry lands on another
// instance.
const RetryAfterSeconds = "1"

// The bodies of the 503 answers that refuse a request during the shutdown.
const (
	refuseRejecting = "lameduck: shutting down; retry on another instance"
	refuseUpgrade   = "lameduck: draining; upgrade on another instance"
)

// Verdict is the Lifecycle's decision on one request that arrives on an
// application server, from [Lifecycle.TrackRequest]. The zero Verdict means
// "serve it as usual".
type Verdict struct {
	// Probe means the path is a probe's (/healthz, /readyz, /readyz/<check>,
	// /startupz, and /prestop when Config.PreStop is set) and the probes are
	// mounted on the application's listeners (Config.ProbeAddr is empty):
	// answer the request with [Lifecycle.ProbeHandler]. It is not tracked.
	Probe bool
	// Refuse, when not empty, means: do not serve the request; answer it
	// 503 Service Unavailable with the headers Retry-After:
	// [RetryAfterSeconds] and Connection: close and Refuse, plus a newline,
	// as a text/plain; charset=utf-8 body (what net/http's http.Error
	// writes). It is not tracked. It is set in reject mode
	// (Config.SendRetryAfter, during the teardown), and for an upgrade
	// (WebSocket) that asks to start after the shutdown signal, so its
	// client opens it on another instance.
	Refuse string
	// Close means the shutdown signal has come: mark the response
	// Connection: close, so an HTTP/1 keep-alive client moves to a fresh
	// connection, which lands on another pod once endpoints have caught up
	// (an HTTP/2 or gRPC server sends GOAWAY instead). Set with Refuse too.
	Close bool
}

// admit decides a request: the one rule behind wrap and TrackRequest.
// upgrade is read only from the signal on.
func (l *Lifecycle) admit(path string, upgrade bool) Verdict {
	if l.cfg.ProbeAddr == "" && l.shared.isProbePath(path) {
		return Verdict{Probe: true}
	}
	switch l.state.Load() {
	case stateServing:
		return Verdict{}
	case stateRejecting:
		return Verdict{Refuse: refuseRejecting, Close: true}
	}
	if upgrade {
		return Verdict{Refuse: refuseUpgrade, Close: true}
	}
	return Verdict{Close: true}
}

// TrackRequest is the request-tracking middleware for a server that is not
// a net/http one (a Fiber app, a gRPC server registered with
// [Lifecycle.AddServerFuncs]): call it first, before any other middleware,
// for every request, and act on the [Verdict]:
//
//   - v.Probe: answer with ProbeHandler (an adapter to net/http);
//   - v.Refuse != "": answer 503 as Verdict.Refuse says, and stop;
//   - otherwise serve the request, marking the response Connection: close
//     when v.Close is set, and call the Tracked's End when the handler has
//     returned (defer tr.End()).
//
// A served request is in flight from TrackRequest to End: the teardown
// waits for it, the idle drain (DrainIdle) counts it as traffic, and one
// that outlives the teardown budget is named in the log by method, path and
// age, exactly as a request on an *http.Server registered with AddServer.
// method and path are read until End (and copied only if the request is
// named), so they may alias a buffer the server reuses after End; a request
// whose connection is hijacked outlives its handler, and Tracked.Hijacked
// copies them then.
//
// upgrade reports whether the request asks to switch protocols (an Upgrade
// header: a WebSocket); it is read only from the shutdown signal on
// (Phase() >= PhaseDraining), so a caller may pass false before then and
// save the header lookup.
//
// TrackRequest allocates nothing, takes no lock and costs, while serving,
// one atomic load of a coarse arrival clock (no clock read) and one atomic
// write, which publishes the request as in flight (BenchmarkTrackRequest);
// End makes two more, one that takes the request back and one that frees
// its record. It is safe for concurrent use.
func (l *Lifecycle) TrackRequest(method, path string, upgrade bool) (Tracked, Verdict) {
	v := l.admit(path, upgrade)
	if v.Probe || v.Refuse != "" {
		return Tracked{}, v
	}
	rec, gen := l.track.begin(method, path, nil)
	return Tracked{rec, gen}, v
}

// Tracked is one request in flight, from [Lifecycle.TrackRequest]. Its zero
// value (the answer for a request that is not tracked) does nothing. A
// Tracked is used by the request's own goroutine; End is called once.
//
// Misuse is harmless: a second End, an End or Hijacked after the request
// ended (by End, or by the close of a connection Hijacked tied it to), or a
// copy of the Tracked used after that, does nothing. A Tracked names one
// request, never the record the Lifecycle recycles for the next one, so a
// stale Tracked can neither end another request nor bring its own back in
// flight.
type Tracked struct {
	rec *reqRecord
	gen uint64 // rec's generation when this request began
}

// End records that the request has finished: its handler returned. Call it
// once per tracked request, and not after Hijacked reported true (the
// connection's close ends the request then); a call on a request that has
// already ended does nothing. It allocates nothing.
func (t Tracked) End() {
	if t.rec != nil {
		t.rec.t.end(t.rec, t.gen)
	}
}

// Hijacked records that the request's connection has left the server's
// care, as a WebSocket's does after its upgrade: from now on the idle drain
// no longer waits for it (a WebSocket that sends no KeepAlive does not hold
// the window), it is named "hijacked" if the teardown budget cuts it, and
// the teardown closes conn then. It copies the request's method and path,
// which may alias buffers its server reuses once the handler has returned
// (Fiber's pooled Ctx): the session outlives them. Call it before the
// handler returns.
//
// When conn is a connection accepted on a listener that the Lifecycle
// handed to ServerFuncs.Serve (as fasthttp's RequestCtx.Conn is for a Fiber
// app), the request ends when conn is closed, by its handler or by the
// teardown, and Hijacked reports true: do not call End. Otherwise it
// reports false and the caller calls End when the session ends. On a
// request that has already ended it does nothing and reports false.
func (t Tracked) Hijacked(conn net.Conn) bool {
	rec := t.rec
	if rec == nil || !rec.holdGen(t.gen) {
		return false
	}
	// Held, in this request's generation: the fields are this request's.
	rec.method, rec.path = strings.Clone(rec.method), strings.Clone(rec.path)
	rec.hijacked, rec.conn = true, conn
	rec.release(t.gen | recBusy)
	c, ok := conn.(*extConn)
	if !ok {
		return false
	}
	if !c.endOnClose(t) {
		t.End() // closed already
	}
	return true
}

// KeepAlive moves the idle drain's clock to now, as a request arriving
// would: call it per message from a long-lived subscription (a WebSocket)
// that should keep the pod alive while it is used. Outside DrainIdle mode it
// has no effect on the sequence. It costs one clock read and one atomic
// store; it is safe for concurrent use.
func (l *Lifecycle) KeepAlive() { l.track.touch() }

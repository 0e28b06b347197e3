// Package ldfasthttp runs a fasthttp server (github.com/valyala/fasthttp)
// under a lameduck Lifecycle, with the same probes and the same drain as a
// net/http server registered with Lifecycle.AddServer. It is also the
// fasthttp half of contrib/fiber (Fiber v2) and contrib/fiberv3 (Fiber v3),
// which add only Fiber's handler types around it.
//
//   - [AddServer] registers a *fasthttp.Server: Run binds its listener,
//     serves it, and in the teardown lets its requests end before
//     Server.ShutdownWithContext closes its idle connections ([ServerFuncs]),
//     all under the teardown budget, then closes what is left; what is cut
//     is named in the log with method, path and age.
//   - [Middleware.Handler] wraps the server's handler: it answers /healthz,
//     /readyz (with /readyz/<check>, ?verbose, ?exclude and
//     application/health+json), /startupz and /prestop with the very
//     handler net/http servers use, so bodies and headers are the same byte
//     for byte; it tracks every other request as in flight without
//     allocating; from the shutdown signal on it marks responses
//     Connection: close and refuses upgrades 503 with Retry-After; in reject
//     mode (LAMEDUCK_SEND_RETRY_AFTER) it refuses every new request.
//
// fasthttp closes RequestCtx.Done() when ShutdownWithContext begins; the
// teardown calls it only once the requests the server was serving have
// ended (or the budget is spent), so a handler may hand its RequestCtx to
// a database call: it is cancelled at the budget, not when the teardown
// starts. fasthttp never tells a running handler that its client has left
// (it does not read the connection while the handler runs). Handlers that
// stream watch Lifecycle.Events().WindowEnded.Done().
// See the operations guide, docs/probes-and-shutdown.md, for the sequence.
//
// Import it as
//
//	import ldfasthttp "github.com/lameduck/lameduck/contrib/fasthttp"
//
// A framework built on fasthttp other than Fiber joins the same sequence
// with [ServerFuncs], [Middleware.Begin] and [Middleware.End], as the Fiber
// modules do (see the examples).
package ldfasthttp

import (
	"bufio"
	"bytes"
	"net"
	"net/url"
	"strings"
	"unsafe"

	"github.com/lameduck/lameduck"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// AddServer registers srv with lc, as Lifecycle.AddServer does an
// *http.Server, with the arguments in the order of every contrib
// AddServer: the Lifecycle, the server, its address, a listener (the
// address is an argument because a fasthttp.Server has no Addr field, where
// an http.Server carries its own). Run binds addr (or uses ln when not nil), serves srv on it
// with Server.Serve, and in the teardown, beside the HTTP servers and under
// the same budget, stops it in this order (see [ServerFuncs]): the listener
// closes; every request srv is serving runs to its end, with its
// RequestCtx.Done() still open; then Server.ShutdownWithContext closes the
// idle keep-alive connections (counted in the log) and returns. At the
// budget every connection still open is closed, hijacked ones included,
// and the requests cut are named. Wrap srv.Handler with
// [Middleware.Handler] first, or its requests are neither tracked nor told
// to close, and the probes are not mounted. AddServer sets srv.ConnState
// (chaining the hook srv had).
//
// It returns the error of Lifecycle.AddServerFuncs: an error naming an
// empty addr with a nil ln, or an error once Run has
// started.
func AddServer(lc *lameduck.Lifecycle, srv *fasthttp.Server, addr string, ln net.Listener) error {
	// No forced stop of fasthttp's own: at the budget, Close ends the
	// requests' contexts and the Lifecycle closes the connections accepted
	// on the listener it handed to Serve.
	funcs := ServerFuncs(lc, "fasthttp", srv, srv.Serve, srv.ShutdownWithContext)
	funcs.Addr = addr
	return lc.AddServerFuncs(funcs, ln)
}

// Middleware is lameduck's request-tracking middleware for fasthttp: the
// first thing every request goes through. Create one with [New]; the zero
// value is not usable. It is safe for concurrent use.
type Middleware struct {
	lc     *lameduck.Lifecycle
	probes fasthttp.RequestHandler
}

// New returns the middleware for lc.
func New(lc *lameduck.Lifecycle) *Middleware {
	return &Middleware{lc: lc, probes: fasthttpadaptor.NewFastHTTPHandler(lc.ProbeHandler())}
}

// Handler returns next wrapped by the middleware: Begin, then next, then
// End. Install it outermost, before authentication and rate limits: a probe
// must not need credentials, and a request that reaches another handler
// first is not tracked.
func (m *Middleware) Handler(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(fc *fasthttp.RequestCtx) {
		tr, answered := m.Begin(fc)
		if answered {
			return
		}
		defer m.End(fc, tr)
		next(fc)
	}
}

// Begin starts one request, as Lifecycle.TrackRequest decides it, under
// its method and the path net/http's Request.URL.Path would hold:
// percent-decoded, neither cleaned nor lower-cased, so /readyz%2Fdb is the
// readiness of the check "db" and //readyz is no probe, as on net/http. It reports answered when it has answered the request itself,
// and the caller must then neither serve it nor call End:
//
//   - a probe path (unless Config.ProbeAddr gives the probes their own
//     listener): answered by lc.ProbeHandler() through fasthttpadaptor, the
//     same renderer as net/http, so the same bodies and headers;
//   - a WebSocket upgrade after the shutdown signal, or any request in
//     reject mode: 503 with Retry-After: 1, Connection: close,
//     X-Content-Type-Options: nosniff and a text/plain body, as net/http's
//     http.Error writes it.
//
// Otherwise the request is tracked, its response is marked Connection:
// close from the signal on (RequestCtx.SetConnectionClose), and the caller
// serves it, then calls End. Begin allocates nothing for a request it
// tracks.
func (m *Middleware) Begin(fc *fasthttp.RequestCtx) (tr lameduck.Tracked, answered bool) {
	upgrade := m.lc.Phase() >= lameduck.PhaseDraining && len(fc.Request.Header.Peek(fasthttp.HeaderUpgrade)) > 0
	tr, v := m.lc.TrackRequest(unsafeString(fc.Method()), requestPath(fc), upgrade)
	switch {
	case v.Probe:
		m.probes(fc)
		return tr, true
	case v.Refuse != "":
		fc.Response.Header.Set(fasthttp.HeaderRetryAfter, lameduck.RetryAfterSeconds)
		fc.Response.Header.Set(fasthttp.HeaderXContentTypeOptions, "nosniff")
		fc.SetConnectionClose()
		fc.SetContentType("text/plain; charset=utf-8")
		fc.SetStatusCode(fasthttp.StatusServiceUnavailable)
		fc.SetBodyString(v.Refuse + "\n")
		return tr, true
	case v.Close:
		fc.SetConnectionClose()
	}
	return tr, false
}

// End ends a request Begin tracked, once its handlers have returned (call
// it deferred, so a panic ends it too). When they hijacked the connection
// (RequestCtx.Hijack: a WebSocket upgrade), the request stays in flight
// until that connection closes, so the teardown waits for the session and
// names it "hijacked" if it has to cut it; the idle drain does not wait for
// it. Its method and path are copied then (Tracked.Hijacked), since
// fasthttp and Fiber reuse their request buffers for the connection's next
// request or another one.
//
// End also marks the response Connection: close when the shutdown signal
// came while the handlers ran (the request began before it, so Begin did
// not): the connection closes once the response is written instead of
// going idle, and no keep-alive client reuses it as the teardown closes
// idle connections. It allocates nothing for a request that was not
// hijacked; [Middleware.Handler] and the Fiber middlewares call it.
//
// End does not see a response body that fasthttp writes after the handlers
// returned (RequestCtx.SetBodyStreamWriter, or Fiber's own stream methods):
// such a stream is not counted in flight. ShutdownWithContext still waits
// for its connection, and at the budget the Lifecycle closes it, counted in
// the log's closed connections rather than named. Stream from the handler
// with [Stream] instead, which counts it in flight until it has been
// written.
func (m *Middleware) End(fc *fasthttp.RequestCtx, tr lameduck.Tracked) {
	if fc.Hijacked() {
		if !tr.Hijacked(fc.Conn()) {
			tr.End()
		}
		return
	}
	if m.lc.Phase() >= lameduck.PhaseDraining {
		fc.SetConnectionClose()
	}
	tr.End()
}

// Stream sets fn as fc's streamed response body (RequestCtx.SetBodyStreamWriter)
// and counts the stream as a request in flight, under the request's method
// and path, until fn has returned: the teardown waits for it, the idle drain
// counts it as traffic, and the budget names it if it has to cut it, as for
// a net/http handler that streams. fn runs in a goroutine of fasthttp's,
// after the handler returned; it should end the stream when lc.Events().WindowEnded.Done() is
// closed (a final event, then return) and return when a Flush fails (the
// client left). Stream is for a request the middleware admitted; in reject
// mode, or without the middleware's admission, the stream is still written
// but not counted.
func Stream(lc *lameduck.Lifecycle, fc *fasthttp.RequestCtx, fn func(w *bufio.Writer)) {
	// Copies: the strings outlive the handler.
	tr, _ := lc.TrackRequest(string(fc.Method()), strings.Clone(requestPath(fc)), false)
	fc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer tr.End()
		fn(w)
	})
}

// requestPath returns fc's request path as net/http's Request.URL.Path
// holds it: the path of the request target, percent-decoded (RFC 3986,
// section 2.1), neither cleaned nor lower-cased, so that the probe paths and the names in
// the log are the same on fasthttp as on net/http: /readyz%2Fdb is the
// readiness of the check "db" on both, //readyz is a probe on neither.
// (fasthttp's RequestCtx.Path also cleans the path: /a/../readyz would be
// a probe there and not on net/http; Fiber's Ctx.Path is not decoded unless
// Config.UnescapePath is set.)
//
// A path without a '%' is returned without copying: it aliases fasthttp's
// buffer and is valid until the handler returns. A path with one is
// decoded into a new string; one with a malformed escape, which net/http
// refuses with 400 Bad Request before any handler sees it, is returned as
// it came.
func requestPath(fc *fasthttp.RequestCtx) string {
	raw := fc.URI().PathOriginal()
	if bytes.IndexByte(raw, '%') < 0 {
		return unsafeString(raw)
	}
	p, err := url.PathUnescape(string(raw))
	if err != nil {
		return string(raw)
	}
	return p
}

// unsafeString returns b as a string without copying; b must not change
// while the string is used (TrackRequest reads it until End).
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

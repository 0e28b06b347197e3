// Package ldconnect serves Connect RPC handlers (connectrpc.com/connect) under
// a lameduck Lifecycle: one net/http server that answers the Connect, gRPC
// and gRPC-Web protocols over HTTP/1.1 and cleartext HTTP/2 (h2c, the way a
// client inside a cluster calls it), drained in the same shutdown sequence
// and under the same budget as every other server, with a gRPC health
// service (grpc.health.v1, through connectrpc.com/grpchealth) that answers
// from the Lifecycle's own probes, so the kubelet's native gRPC probe works
// against it.
//
// Import it as
//
//	import ldconnect "github.com/lameduck/lameduck/contrib/connect"
//
// It is a module of its own, so importing it pulls connect-go and
// grpchealth and nothing else beyond lameduck's standard-library core. The
// operator's page is docs/connect.md in the lameduck repository.
//
// The sequence for a Connect server (the timeline is lameduck.Events'):
//
//  1. starting: the health service answers NOT_SERVING for every service
//     but "liveness"; calls are served;
//  2. serving: SERVING, with "readiness" and "" following /readyz;
//  3. the signal: NOT_SERVING for every service but "liveness", for good,
//     from when /readyz turns 503 (at the signal, or at the window's end
//     under lameduck.Config.NotReadyAt "teardown"); calls are still served through the lame-duck window, for clients that
//     have not yet learned of the endpoint's removal; every response from
//     now on carries Connection: close, which net/http turns into a GOAWAY
//     on an HTTP/2 connection, so each client moves to a fresh connection,
//     and so to another pod;
//  4. the window's end: server-streaming and bidirectional calls have their
//     context cancelled and end with connect.CodeUnavailable ("reconnect to
//     another instance"); the listener closes; http.Server.Shutdown sends
//     GOAWAY on every HTTP/2 connection and waits for the unary and
//     client-streaming calls in flight;
//  5. the budget: what is left is closed, and the calls cut are named in the
//     log (procedure and age), as HTTP requests are.
package ldconnect

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/rpcserve"
)

// Server ties Connect handlers to one Lifecycle: its interceptor ends
// streams at the window's end, its HTTP wrapper tracks every call as a
// request in flight, and its health service answers grpc.health.v1 from the
// Lifecycle's phase and readiness checks. The health service's own calls
// (Check, Watch) are probes, not application traffic, as HTTP probes are
// (docs/probes-and-shutdown.md): they are not counted in flight
// (Lifecycle.InFlight), do not keep the idle drain (DrainIdle) open, are
// never named as cut, and are answered in reject mode
// (Config.SendRetryAfter); a Watch stream still ends at the window's end.
//
// Create one with [New], pass [Server.HandlerOptions] to every Connect
// handler constructor, and register the *http.Server that carries them with
// [Server.AddServer]. Its methods are safe for concurrent use.
type Server struct {
	lc     *lameduck.Lifecycle
	health *Health
	icpt   *interceptor
}

// New returns a Server for lc. It starts nothing.
func New(lc *lameduck.Lifecycle) *Server {
	return &Server{lc: lc, health: newHealth(lc), icpt: &interceptor{lc: lc}}
}

// Health returns the health service that [Server.AddServer] mounts on every
// server it registers.
func (s *Server) Health() *Health { return s.health }

// HandlerOptions returns the options every Connect handler of the service
// needs to be drained: one interceptor, which ends server-streaming and
// bidirectional calls at the lame-duck window's end. Pass them to each
// generated constructor, before the application's own options:
//
//	mux.Handle(pingv1connect.NewPingServiceHandler(svc, srv.HandlerOptions()...))
//
// A handler built without them is still tracked and drained, but its
// long-lived streams hold the teardown until its budget cuts them.
func (s *Server) HandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{connect.WithInterceptors(s.icpt)}
}

// AddServer registers srv, whose Handler carries the application's Connect
// handlers (http.DefaultServeMux when nil), with the Lifecycle, to be bound,
// served and stopped by Run in the shutdown sequence. The verb and the order
// of the arguments are those of every server integration; like
// Lifecycle.AddServer, it takes no address, which srv.Addr carries (":http"
// when empty), and the Lifecycle is the one New was given. If ln is nil, Run
// binds srv.Addr over TCP.
//
// AddServer changes srv before returning:
//
//   - srv.Protocols, when nil, is set to HTTP/1.1, HTTP/2 over TLS and
//     unencrypted HTTP/2 (h2c with prior knowledge, what gRPC clients and
//     the kubelet's gRPC probe speak in a cluster); a Protocols the caller
//     set is kept as it is;
//   - srv.Handler is wrapped: the health service (grpc.health.v1.Health/,
//     see [Health]) and the probe paths (/healthz, /readyz, /startupz,
//     /prestop when enabled, unless Config.ProbeAddr moves them) are
//     answered first, untracked; every other request is tracked as in
//     flight, as Lifecycle.TrackRequest describes, and from the shutdown
//     signal on its response carries Connection: close (GOAWAY on HTTP/2).
//     In reject mode (Config.SendRetryAfter) a new call is refused with
//     connect.CodeUnavailable in its own protocol, Retry-After: 1.
//
// When srv.TLSConfig is set, Run serves TLS with the certificates in it
// (Certificates or GetCertificate). Do not call srv's Serve, Shutdown or
// Close yourself, nor register srv with Lifecycle.AddServer too.
//
// Teardown, beside the other servers and under the same budget: the
// listener closes, then http.Server.Shutdown sends GOAWAY on every HTTP/2
// connection, closes idle ones and waits for the calls in flight (streams
// have been ended at the window's end); at the budget, http.Server.Close
// and the Lifecycle close every connection left, and the calls still
// running are named in the log. Like net/http's Close, this does not wait
// for a handler that ignores its cancelled context.
//
// AddServer returns an error naming the problem for a nil srv, and the
// error of Lifecycle.AddServerFuncs (an error once Run
// has started). It is safe for concurrent use.
func (s *Server) AddServer(srv *http.Server, ln net.Listener) error {
	if srv == nil {
		return errors.New("lameduck: ldconnect.Server.AddServer: the *http.Server is nil; pass the server whose Handler carries the Connect handlers")
	}
	if srv.Protocols == nil {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = p
	}
	addr := srv.Addr
	if addr == "" {
		addr = ":http"
	}
	healthPath, healthHandler := grpchealth.NewHandler(s.health, s.HandlerOptions()...)
	srv.Handler = &handler{lc: s.lc, app: srv.Handler, healthPath: healthPath, health: healthHandler,
		refuse: connect.NewErrorWriter()}
	tls := srv.TLSConfig != nil
	return s.lc.AddServerFuncs(lameduck.ServerFuncs{
		Name: "connect",
		Addr: addr,
		Serve: func(ln net.Listener) error {
			if tls {
				return srv.ServeTLS(ln, "", "")
			}
			return srv.Serve(ln)
		},
		Shutdown: srv.Shutdown,
		Close:    srv.Close,
	}, ln)
}

// handler is the HTTP wrapper AddServer installs.
type handler struct {
	lc         *lameduck.Lifecycle
	app        http.Handler
	healthPath string
	health     http.Handler
	refuse     *connect.ErrorWriter
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, h.healthPath) {
		h.health.ServeHTTP(w, r) // a probe: untracked, never refused
		return
	}
	tr, v := h.lc.TrackRequest(r.Method, r.URL.Path, h.lc.Phase() >= lameduck.PhaseDraining && r.Header.Get("Upgrade") != "")
	switch {
	case v.Probe:
		h.lc.ProbeHandler().ServeHTTP(w, r)
		return
	case v.Refuse != "":
		hdr := w.Header()
		hdr.Set("Retry-After", lameduck.RetryAfterSeconds)
		hdr.Set("Connection", "close")
		if h.refuse.IsSupported(r) {
			_ = h.refuse.Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New(v.Refuse)))
			return
		}
		http.Error(w, v.Refuse, http.StatusServiceUnavailable)
		return
	case v.Close:
		// HTTP/1: the connection closes after this response. HTTP/2:
		// net/http turns the header into a GOAWAY once it is written.
		w.Header().Set("Connection", "close")
	}
	defer tr.End()
	app := h.app
	if app == nil {
		app = http.DefaultServeMux
	}
	app.ServeHTTP(w, r)
}

// endedAtDrain is the error of a stream ended at the window's end.
func endedAtDrain() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("lameduck: the server is shutting down; reconnect to another instance"))
}

// interceptor ends server-streaming and bidirectional calls at the window's
// end; unary and client-streaming calls run until they return, under the
// teardown's budget.
type interceptor struct{ lc *lameduck.Lifecycle }

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if conn.Spec().StreamType&connect.StreamTypeServer == 0 {
			// Client streams end when their client stops sending; the
			// teardown's budget bounds them.
			return next(ctx, conn)
		}
		// At the window's end the handler's context ends, and the client
		// is told to go elsewhere, whatever the handler returns.
		return rpcserve.UntilWindowEnd(ctx, i.lc, func(ctx context.Context) error { return next(ctx, conn) }, endedAtDrain)
	}
}

package lameduck

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
)

type server struct {
	srv    *http.Server // nil for a ServerFuncs
	ext    *ServerFuncs // nil for an *http.Server
	extLn  *extListener // what ext.Serve serves on; set by Run
	ln     net.Listener
	probes bool // the Config.ProbeAddr listener: shut down last
	tls    bool // served with ServeTLS; decided before any Serve runs
}

// AddServer registers srv to be served by Run and shut down by the sequence.
// Every server integration in contrib uses the same verb and order
// (ldfiber.AddServer(lc, app, addr, ln), ldfasthttp.AddServer(lc, srv,
// addr, ln)); here the address is srv.Addr, which an http.Server carries.
//
// If ln is nil, Run binds srv.Addr (":http" when empty) over TCP; a bind
// failure makes Run return at once. When srv.TLSConfig is set, Run serves
// TLS (ServeTLS with the certificates in TLSConfig: Certificates or
// GetCertificate), HTTP/2 included; ln must then be a plain TCP listener. At Run, srv.Handler (or
// http.DefaultServeMux when nil) is wrapped: requests to /healthz, /readyz,
// /startupz and, when enabled, /prestop are answered by the probes (unless
// Config.ProbeAddr moves them to their own listener), and every other
// request is tracked as in flight. Do not call srv's Serve, Shutdown or
// Close yourself.
//
// AddServer returns an error once Run has started (the Lifecycle is
// already running).
func (l *Lifecycle) AddServer(srv *http.Server, ln net.Listener) error {
	if srv == nil {
		return errors.New("lameduck: AddServer: nil *http.Server")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return errAlreadyRunning
	}
	l.servers = append(l.servers, &server{srv: srv, ln: ln})
	return nil
}

// bind listens on the address of every server registered without a
// listener. If one cannot bind, it closes every other listener (AddServer
// handed them over) and returns the error, logged, before any request is
// served.
func (l *Lifecycle) bind(servers []*server) error {
	for i, s := range servers {
		if s.ln != nil {
			continue
		}
		var addr string
		if s.ext != nil {
			addr = s.ext.Addr
		} else if addr = s.srv.Addr; addr == "" {
			addr = ":http"
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for j, b := range servers {
				if j != i && b.ln != nil {
					_ = b.ln.Close()
				}
			}
			err = fmt.Errorf("lameduck: listen on %s: %w", addr, err)
			l.log.Error(err.Error())
			return err
		}
		s.ln = ln
	}
	return nil
}

// prepareServers readies the bound servers to serve, and logs each
// listener: an *http.Server's handler is wrapped (the probes, request
// tracking) and its TLS decided, a ServerFuncs gets its tracked listener.
// It warns when no listener serves the probes, and when a server has no
// ReadHeaderTimeout.
func (l *Lifecycle) prepareServers(servers []*server) {
	if len(servers) == 0 {
		l.unprobed.Store(true)
		l.log.Warn("lameduck: no listener serves the probes: nothing answers " + strings.Join(l.cfg.LivenessPaths, ", ") + ", " + l.cfg.ReadinessPath + " or " + l.cfg.StartupPath +
			"; register a server with AddServer, or set " + l.cfg.EnvPrefix + "PROBE_ADDR (such as \":9090\")")
	}
	// One *http.Server may be registered on several listeners (IPv4 and
	// IPv6, say): instrument it once, and decide TLS before any Serve runs
	// (net/http's HTTP/2 setup writes TLSConfig).
	instrumented := map[*http.Server]bool{}
	for _, s := range servers {
		if s.ext != nil {
			s.extLn = newExtListener(s.ln, l.track)
			l.log.Info("lameduck: listening", "addr", s.ln.Addr().String(), "server", s.ext.Name, "probes", l.cfg.ProbeAddr == "")
			continue
		}
		s.tls = s.srv.TLSConfig != nil
		if !s.probes && !instrumented[s.srv] {
			instrumented[s.srv] = true
			l.instrument(s.srv)
			if s.srv.ReadHeaderTimeout <= 0 && s.srv.ReadTimeout <= 0 {
				l.log.Warn("lameduck: the server on "+s.ln.Addr().String()+" has no ReadHeaderTimeout: a client that sends its "+
					"headers slowly (slowloris) holds its connection, and the drain, until the teardown budget is spent; "+
					"set http.Server.ReadHeaderTimeout, such as 10s (docs/security.md)", "addr", s.ln.Addr().String())
			}
		}
		l.log.Info("lameduck: listening", "addr", s.ln.Addr().String(), "tls", s.tls, "probes", s.probes || l.cfg.ProbeAddr == "")
	}
}

// serve runs every server's Serve on its own goroutine, which serving
// counts until it returns (the HTTP drain waits for it). A server that
// stops with an error, other than after the teardown closed it, sends
// that error, logged, on errs (buffered for every server).
func (l *Lifecycle) serve(servers []*server) (serving *sync.WaitGroup, errs <-chan error) {
	serveErrs := make(chan error, len(servers))
	serving = &sync.WaitGroup{}
	for _, s := range servers {
		serving.Go(func() {
			var serve func(net.Listener) error
			switch {
			case s.ext != nil:
				serve = func(net.Listener) error { return s.ext.Serve(s.extLn) }
			case s.tls:
				// Certificates come from TLSConfig (Certificates or
				// GetCertificate); HTTP/2 is negotiated as ServeTLS does.
				serve = func(ln net.Listener) error { return s.srv.ServeTLS(ln, "", "") }
			default:
				serve = s.srv.Serve
			}
			if err := serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !l.closing.Load() {
				err = fmt.Errorf("lameduck: serve on %s: %w", s.ln.Addr(), err)
				l.log.Error(err.Error())
				serveErrs <- err
			}
		})
	}
	return serving, serveErrs
}

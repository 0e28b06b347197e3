package lameduck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// ServerFuncs describes a server that is not an *http.Server (a Fiber app, a
// gRPC server) for [Lifecycle.AddServerFuncs]: how to serve it on a listener
// and how to stop it. The Lifecycle binds it, serves it, and stops it in the
// same teardown, under the same budget and at the same moment, as the
// servers registered with AddServer.
//
// The Lifecycle cannot see inside such a server: its requests are tracked
// only if the server calls [Lifecycle.TrackRequest] for each of them, first
// thing (contrib/fiber's middleware and contrib/grpc's interceptors do).
type ServerFuncs struct {
	// Name names the server in the log, such as "fiber" or "grpc". Required.
	Name string
	// Addr is the TCP address Run binds (":8080") when AddServerFuncs is
	// given no listener; ignored otherwise.
	Addr string
	// Serve serves on ln until ln is closed or Shutdown or Close is called.
	// Run calls it once, in a goroutine of its own, once every server is
	// bound (fiber's App.Listener, grpc's Server.Serve). An error it returns
	// after the teardown closed ln is expected and ignored; any other error
	// starts the shutdown sequence and is returned by Run, as a failing
	// http.Server.Serve's is. Required.
	Serve func(ln net.Listener) error
	// Shutdown stops the server gracefully: it stops accepting, lets the
	// requests in flight finish, closes idle connections, and returns nil
	// once they have finished, or ctx.Err() when ctx ends first; ctx ends
	// when the teardown's budget for requests is spent (fiber's
	// App.ShutdownWithContext; for gRPC, GracefulStop raced against ctx).
	// It must return soon after ctx ends. Required.
	Shutdown func(ctx context.Context) error
	// Close stops the server at once, closing its connections (grpc's
	// Server.Stop). Run calls it only when Shutdown did not finish within
	// the budget, and then closes every connection accepted on the
	// listener it handed to Serve in any case, so it may be nil.
	Close func() error
}

// AddServerFuncs registers a server that is not an *http.Server, to be
// served by Run and stopped by the shutdown sequence. It is the AddServer of
// other servers:
//
//   - bind: if ln is nil, Run binds s.Addr over TCP; a bind failure makes
//     Run return at once, as for AddServer;
//   - serve: Run calls s.Serve with a listener that wraps ln, so that the
//     teardown knows the connections accepted on it (ln must be a plain
//     listener: a server that terminates TLS does so inside Serve, such as
//     with tls.NewListener, or with gRPC's credentials);
//   - teardown, side by side with the HTTP servers' drain and under the
//     same deadline: the listener closes (Close on it is idempotent, so a
//     server's own Shutdown may close it again); connections accepted just
//     before that get a moment (a tenth of the budget, at most 250ms) to
//     send their first bytes, and those still silent are closed; then
//     s.Shutdown runs with a context that ends at the budget, and the
//     teardown waits for every request tracked with TrackRequest. At the
//     budget, s.Close (when set) runs and every connection still open on
//     the listener, hijacked ones included, is closed; the requests still
//     tracked are named in the log (method, path, age) and Run's error
//     wraps context.DeadlineExceeded.
//
// Do not call s.Serve, s.Shutdown or s.Close yourself. AddServerFuncs
// returns an error naming the missing field when Name, Serve or Shutdown is
// nil, or when ln is nil and Addr is empty, and one saying the Lifecycle
// is already running once Run has started. It is safe for concurrent use.
func (l *Lifecycle) AddServerFuncs(s ServerFuncs, ln net.Listener) error {
	var missing []string
	if s.Name == "" {
		missing = append(missing, "Name")
	}
	if s.Serve == nil {
		missing = append(missing, "Serve")
	}
	if s.Shutdown == nil {
		missing = append(missing, "Shutdown")
	}
	if ln == nil && s.Addr == "" {
		missing = append(missing, "Addr (or a listener)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("lameduck: AddServerFuncs(%q): set %v", s.Name, missing)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return errAlreadyRunning
	}
	l.servers = append(l.servers, &server{ext: &s, ln: ln})
	return nil
}

// extListener is the listener handed to ServerFuncs.Serve. It records every
// connection it accepts, so that the teardown can wait for their first bytes
// (as ConnState's StateNew does for net/http) and close what is left at the
// budget; its Close is idempotent.
type extListener struct {
	net.Listener
	t        *tracker
	once     sync.Once
	closeErr error    // set once by Close
	conns    sync.Map // *extConn → struct{}: accepted and not closed
}

func newExtListener(ln net.Listener, t *tracker) *extListener {
	return &extListener{Listener: ln, t: t}
}

// Accept waits for and returns the next connection, wrapped.
func (ln *extListener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ec := &extConn{Conn: c, ln: ln}
	ln.conns.Store(ec, struct{}{})
	ln.t.connState(ec, http.StateNew)
	return ec, nil
}

// Close closes the listener once; later calls return nil.
func (ln *extListener) Close() error {
	ln.once.Do(func() { ln.closeErr = ln.Listener.Close() })
	return ln.closeErr
}

// closeAll closes every connection still open and returns how many.
func (ln *extListener) closeAll() int {
	n := 0
	ln.conns.Range(func(k, _ any) bool {
		_ = k.(*extConn).Close()
		n++
		return true
	})
	return n
}

// extConn is a connection accepted by an extListener. Its Read costs one
// atomic load beyond the connection's own.
type extConn struct {
	net.Conn
	ln   *extListener
	read atomic.Bool // the first bytes have arrived
	once sync.Once

	mu     sync.Mutex
	closed bool    // guarded by mu
	tr     Tracked // a hijacked request that ends when the connection closes; guarded by mu
}

func (c *extConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.read.Load() {
		c.read.Store(true)
		c.ln.t.connState(c, http.StateActive) // no longer fresh
	}
	return n, err
}

// Close closes the connection and, the first time, forgets it and ends the
// hijacked request tied to it.
func (c *extConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.ln.conns.Delete(c)
		c.ln.t.connState(c, http.StateClosed)
		c.mu.Lock()
		c.closed = true
		tr := c.tr
		c.tr = Tracked{}
		c.mu.Unlock()
		tr.End() // the zero Tracked does nothing
	})
	return err
}

// endOnClose ties tr to the connection: Close ends it. It reports false,
// doing nothing, when the connection is closed already.
func (c *extConn) endOnClose(tr Tracked) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.tr = tr
	return true
}

// shutdownExt runs a ServerFuncs' Shutdown under ctx, logging an error that
// is not ctx's.
func (l *Lifecycle) shutdownExt(ctx context.Context, s *server) {
	err := s.ext.Shutdown(ctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
		l.log.Warn("lameduck: server "+s.ext.Name+": shutdown: "+err.Error(), "server", s.ext.Name)
	}
}

// forceExt stops a ServerFuncs at the budget: its Close, then every
// connection still open on its listener.
func (l *Lifecycle) forceExt(s *server) {
	if s.ext.Close != nil {
		if err := s.ext.Close(); err != nil {
			l.log.Warn("lameduck: server "+s.ext.Name+": close: "+err.Error(), "server", s.ext.Name)
		}
	}
	if n := s.extLn.closeAll(); n > 0 {
		l.log.Warn(fmt.Sprintf("lameduck: server %s: closed %d connection(s) at the teardown budget", s.ext.Name, n),
			"server", s.ext.Name, "connections", n)
	}
}

package ldfasthttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/lameduck/lameduck"
	"github.com/valyala/fasthttp"
)

// ServerFuncs returns the lameduck.ServerFuncs (all but Addr) of a server
// built on srv: name names it in the log, serve serves it on a listener
// (srv.Serve, or Fiber's App.Listener), stop stops it gracefully
// (srv.ShutdownWithContext, or Fiber's App.ShutdownWithContext). Its
// Shutdown lets every request srv is serving run to its end before
// fasthttp's own shutdown begins, since fasthttp closes RequestCtx.Done()
// (and so cancels every context derived from it: a database query given
// c.Context() in Fiber v2, c.RequestCtx() in Fiber v3) the moment that
// shutdown begins. Called by the teardown once the listener is closed, it:
//
//  1. waits until no connection of srv is serving a request (none is in
//     fasthttp's StateActive: reading a request, running its handler,
//     writing its response or a streamed body), or until ctx ends, and
//     then returns ctx.Err() at once;
//  2. calls stop with ctx: fasthttp closes the keep-alive connections left
//     idle, whatever srv.ReadTimeout and srv.IdleTimeout are (0 included),
//     and waits for the others;
//  3. logs, through lc's logger, how many idle keep-alive connections that
//     closed ("lameduck: server NAME: closed N idle keep-alive
//     connection(s)", with server and idle_closed) when there were any,
//     and returns stop's error.
//
// Its Close, which the Lifecycle calls at the teardown budget once it has
// named the requests it cuts, calls stop with an ended context: fasthttp
// closes RequestCtx.Done() then, at the budget, and the Lifecycle closes
// every connection left. Connections hijacked (WebSockets) are not waited
// for in step 1; the teardown waits for them as tracked requests.
//
// ServerFuncs installs srv.ConnState (calling the hook srv had, if any,
// after its own bookkeeping): call it before srv serves, and do not replace
// srv.ConnState afterwards. [AddServer] and contrib/fiber's and
// contrib/fiberv3's AddServer call it; call it yourself only to register a
// server built on fasthttp with Lifecycle.AddServerFuncs directly (see the
// example). The hook takes a mutex per
// connection state change, never while calling the previous hook.
func ServerFuncs(lc *lameduck.Lifecycle, name string, srv *fasthttp.Server, serve func(net.Listener) error,
	stop func(context.Context) error) lameduck.ServerFuncs {
	w := &connWatch{next: srv.ConnState, conns: map[net.Conn]fasthttp.ConnState{}}
	srv.ConnState = w.state
	return lameduck.ServerFuncs{
		Name:  name,
		Serve: serve,
		Shutdown: func(ctx context.Context) error {
			w.waitInactive(ctx)
			if err := ctx.Err(); err != nil {
				return err // the budget is spent: Close comes next
			}
			if err := stop(ctx); err != nil {
				return err
			}
			if n := w.idleClosed(); n > 0 {
				lc.Config().Logger.Info(fmt.Sprintf("lameduck: server %s: closed %d idle keep-alive connection(s)", name, n),
					"server", name, "idle_closed", n)
			}
			return nil
		},
		Close: func() error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
}

// connWatch follows the state of each connection of one fasthttp.Server.
type connWatch struct {
	next func(net.Conn, fasthttp.ConnState) // the server's hook before ours; may be nil

	mu       sync.Mutex
	conns    map[net.Conn]fasthttp.ConnState // guarded by mu: open connections, last state
	active   int                             // guarded by mu: connections in StateActive
	inactive chan struct{}                   // guarded by mu: closed when active reaches 0; nil when no one waits
	stopping bool                            // guarded by mu: idle connections closing from now on count
	closed   int                             // guarded by mu: idle connections closed since stopping
}

func (w *connWatch) state(c net.Conn, st fasthttp.ConnState) {
	w.mu.Lock()
	prev, known := w.conns[c]
	switch st {
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(w.conns, c)
		if w.stopping && known && prev == fasthttp.StateIdle && st == fasthttp.StateClosed {
			w.closed++
		}
	default:
		w.conns[c] = st
	}
	if st == fasthttp.StateActive && prev != fasthttp.StateActive {
		w.active++
	} else if st != fasthttp.StateActive && known && prev == fasthttp.StateActive {
		w.active--
		if w.active == 0 && w.inactive != nil {
			close(w.inactive)
			w.inactive = nil
		}
	}
	w.mu.Unlock()
	if w.next != nil {
		w.next(c, st)
	}
}

// waitInactive waits until no connection is active, or ctx ends.
func (w *connWatch) waitInactive(ctx context.Context) {
	w.mu.Lock()
	if w.active == 0 {
		w.stopping = true
		w.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	w.inactive = ch
	w.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
	w.mu.Lock()
	w.inactive = nil
	w.stopping = true
	w.mu.Unlock()
}

// idleClosed returns how many idle connections closed since the stop
// began, once the stop has returned nil (every connection is closed then,
// though fasthttp may report a connection's StateClosed a moment after
// its count of open connections reached zero: those still idle here are
// counted as closed, once).
func (w *connWatch) idleClosed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c, st := range w.conns {
		if st == fasthttp.StateIdle {
			w.closed++
			delete(w.conns, c)
		}
	}
	return w.closed
}

// Package testsupport holds what lameduck's own tests share, in the core
// and in the contrib modules: a goroutine-safe log sink (LogBuffer), hang
// guards (Recv, Await, Timers), fetch helpers (Fetch, Do), finding the
// servers this machine runs, a TCP proxy that cuts and stalls a connection
// to one of them, and a Lifecycle whose /readyz a test reads probe by
// probe. It is internal: no user imports it.
package testsupport

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between a client under test and a real server, for
// fault tests that must never stop the shared server: Cut makes it an
// outage (every connection closed, new ones closed on accept), Stall makes
// it a server that accepts and never answers (bytes in are read and
// dropped, nothing comes back), Restore makes it forward again.
//
// Every goroutine it starts ends when both sides of its connection are
// closed, and all have ended when the test's cleanup has run.
type Proxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string             // guarded by mu
	mode   proxyMode          // guarded by mu
	conns  map[*pipe]struct{} // guarded by mu
	wg     sync.WaitGroup
}

type proxyMode int

const (
	forward proxyMode = iota
	cut
	stall
)

type pipe struct {
	client, server net.Conn
	stalled        bool // guarded by Proxy.mu
}

// NewProxy listens on a free port of 127.0.0.1 and forwards to target; it
// is closed, and its goroutines joined, in t's cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pipe]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Cut closes every connection and closes each new one as it is accepted.
func (p *Proxy) Cut() { p.set(cut) }

// Stall stops forwarding: every open and new connection stays open, what
// the client sends is read and dropped, and nothing is sent back.
func (p *Proxy) Stall() { p.set(stall) }

// Restore forwards new connections again; connections that were stalled
// are closed (their bytes are lost, as after a real network partition).
func (p *Proxy) Restore() { p.set(forward) }

// Retarget forwards new connections to target from now on; open ones stay
// as they are. A server of the test's own that is restarted binds a port
// of its choosing (127.0.0.1:0) rather than the one it had, which another
// process may have taken meanwhile: the client, which knows only the
// proxy's address, never sees the change.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

func (p *Proxy) set(m proxyMode) {
	p.mu.Lock()
	p.mode = m
	var closing []*pipe
	for c := range p.conns {
		switch {
		case m == cut, m == forward && c.stalled:
			closing = append(closing, c)
		case m == stall:
			c.stalled = true
		}
	}
	p.mu.Unlock()
	for _, c := range closing {
		c.close()
	}
}

func (c *pipe) close() {
	_ = c.client.Close()
	if c.server != nil {
		_ = c.server.Close()
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode, target := p.mode, p.target
		p.mu.Unlock()
		switch mode {
		case cut:
			_ = client.Close()
			continue
		case stall:
			c := &pipe{client: client, stalled: true}
			p.track(c)
			p.wg.Go(func() { defer p.untrack(c); _, _ = io.Copy(io.Discard, client) })
			continue
		}
		server, err := net.Dial("tcp", target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &pipe{client: client, server: server}
		p.track(c)
		done := make(chan struct{}, 2)
		copyHalf := func(dst, src net.Conn) {
			_, _ = io.Copy(&gate{p: p, c: c, w: dst}, src)
			done <- struct{}{}
		}
		p.wg.Go(func() { copyHalf(server, client) })
		p.wg.Go(func() { copyHalf(client, server) })
		p.wg.Go(func() {
			<-done // one half ended: end the other
			c.close()
			<-done
			p.untrack(c)
		})
	}
}

// gate drops writes while its pipe is stalled.
type gate struct {
	p *Proxy
	c *pipe
	w io.Writer
}

func (g *gate) Write(b []byte) (int, error) {
	g.p.mu.Lock()
	stalled := g.c.stalled
	g.p.mu.Unlock()
	if stalled {
		return len(b), nil
	}
	return g.w.Write(b)
}

func (p *Proxy) track(c *pipe) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *Proxy) untrack(c *pipe) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.set(cut)
	p.wg.Wait()
}

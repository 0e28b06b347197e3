package testsupport

import (
	"context"
	"net"
	"sync"
	"testing"
)

// ListenHeld listens on a loopback port that stays reserved after the
// listener is closed, until t ends: a second socket, bound to the same port
// with SO_REUSEPORT and never listening, holds it (HoldPort). A dial after
// the close is then refused for sure, and no other process (another test
// binary binding 127.0.0.1:0) can take the freed port and answer in the
// closed server's place. Only on Linux is the port held; elsewhere a dial
// after the close is refused as long as no other process binds the port
// first.
func ListenHeld(t testing.TB) net.Listener {
	t.Helper()
	ln, err := ReusePort().Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	HoldPort(t, ln.Addr().(*net.TCPAddr).Port)
	return ln
}

// TCPServer listens on a held loopback port (ListenHeld) and hands each
// connection it accepts to serve, in the accept loop, which must close it.
// stop closes the listener, the port staying held (a dial is then refused),
// and joins the loop; it is safe to call more than once, and t's cleanup
// calls it.
func TCPServer(t testing.TB, serve func(net.Conn)) (addr string, stop func()) {
	t.Helper()
	ln := ListenHeld(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			serve(c)
		}
	})
	stop = sync.OnceFunc(func() { ln.Close(); wg.Wait() })
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

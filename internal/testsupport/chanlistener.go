package testsupport

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
)

// ChanListener is a listener with no network under it, for a synctest
// bubble: Accept blocks on a channel (durably) until Close. Make it with
// NewChanListener.
type ChanListener struct {
	once   sync.Once
	closed chan struct{}
}

// NewChanListener returns an open ChanListener.
func NewChanListener() *ChanListener { return &ChanListener{closed: make(chan struct{})} }

// Accept blocks until Close, then returns net.ErrClosed.
func (l *ChanListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

// Close ends every Accept, now and later; it never fails.
func (l *ChanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is a loopback address with no port: nothing listens there.
func (l *ChanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// SlowServer is a server named "fake" that accepts and drops connections
// and whose Shutdown takes drain (on the test's clock: a synctest bubble's,
// where time.Sleep is exact). Serve it on a ChanListener to bind no socket.
func SlowServer(drain time.Duration) lameduck.ServerFuncs {
	return lameduck.ServerFuncs{
		Name: "fake",
		Serve: func(ln net.Listener) error {
			for {
				if _, err := ln.Accept(); err != nil {
					return err
				}
			}
		},
		Shutdown: func(context.Context) error { time.Sleep(drain); return nil },
	}
}

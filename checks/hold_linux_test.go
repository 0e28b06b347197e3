//go:build linux && !(mips || mipsle || mips64 || mips64le)

package checks_test

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// soReusePort is SO_REUSEPORT on Linux (the generic value; MIPS differs
// and is built without it), which the syscall package does not name.
const soReusePort = 0xf

// listenHeld listens on a loopback port that stays reserved after the
// listener is closed, until the test ends: a second socket, bound to the
// same port with SO_REUSEPORT and never listening, holds it. A dial after
// the close is then refused for sure, and no other process (another test
// binary binding 127.0.0.1:0) can take the freed port and answer in the
// closed server's place. As cmd/lameduck's e2e listenTCP does.
func listenHeld(t *testing.T) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	hold, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(hold) })
	if err := syscall.SetsockoptInt(hold, syscall.SOL_SOCKET, soReusePort, 1); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	if err := syscall.Bind(hold, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		ln.Close()
		t.Fatalf("reserve port %d: %v", port, err)
	}
	return ln
}

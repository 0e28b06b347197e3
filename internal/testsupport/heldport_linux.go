//go:build linux && !(mips || mipsle || mips64 || mips64le)

package testsupport

import (
	"net"
	"syscall"
	"testing"
)

// soReusePort is SO_REUSEPORT on Linux (the generic value; MIPS differs
// and is built without it), which the syscall package does not name.
const soReusePort = 0xf

// HoldPort binds a socket with SO_REUSEPORT to port on 127.0.0.1 (0: a port
// the kernel picks) and never listens on it, until t ends; it returns the
// port. Connections to it are refused, and no other socket can bind it but
// one that sets SO_REUSEPORT too (ReusePort): the kernel never hands a held
// port to a bind to port 0, and a plain bind fails with "address already in
// use".
func HoldPort(t testing.TB, port int) int {
	t.Helper()
	hold, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(hold) })
	if err := syscall.SetsockoptInt(hold, syscall.SOL_SOCKET, soReusePort, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(hold, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("reserve port %d: %v", port, err)
	}
	sa, err := syscall.Getsockname(hold)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// ReusePort returns a ListenConfig whose sockets set SO_REUSEPORT, so a
// listener can come back on a port HoldPort keeps reserved.
func ReusePort() *net.ListenConfig {
	return &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
}

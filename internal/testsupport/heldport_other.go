//go:build !linux || mips || mipsle || mips64 || mips64le

package testsupport

import (
	"net"
	"testing"
)

// HoldPort cannot hold a port here (only on Linux, heldport_linux.go): it
// returns port, or for 0 a loopback port that was free a moment ago, whose
// connections are refused as long as no other process binds it.
func HoldPort(t testing.TB, port int) int {
	t.Helper()
	if port != 0 {
		return port
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ReusePort returns a plain ListenConfig: HoldPort holds no port here.
func ReusePort() *net.ListenConfig { return &net.ListenConfig{} }

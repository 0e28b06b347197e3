//go:build !linux || mips || mipsle || mips64 || mips64le

package checks_test

import (
	"net"
	"testing"
)

// listenHeld listens on a loopback port. Only on Linux is the port held
// after the listener closes (hold_linux_test.go); here a dial after the
// close is refused as long as no other process binds the freed port first.
func listenHeld(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

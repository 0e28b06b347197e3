package testsupport

import (
	"context"
	"net"
	"testing"
)

// FreePort returns a port of 127.0.0.1 that was free a moment ago: for a
// server of the test's own that must be told its port before it listens.
// Another process may take it meanwhile. It fails t when it cannot listen.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// GoRun calls run in a goroutine with a child of ctx that stop cancels (as
// SIGTERM stops a worker or a Lifecycle) and delivers run's error on done,
// which is buffered: the goroutine never blocks. Receive from done (Recv
// adds a hang guard) to join it.
func GoRun(ctx context.Context, run func(context.Context) error) (stop context.CancelFunc, done <-chan error) {
	rctx, stop := context.WithCancel(ctx)
	ch := make(chan error, 1)
	go func() { ch <- run(rctx) }()
	return stop, ch
}

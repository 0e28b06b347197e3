//go:build unix

package testsupport

import (
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/lameducktest"
)

// SignalledLifecycle returns a Lifecycle on the real clock that listens to
// the process's signals, with no lame-duck window (no LAMEDUCK_* variable
// is read), the given ShutdownTeardown, and a logger whose lines t's
// cleanup logs when t failed. It fails t when the Lifecycle cannot be
// made. Pair it with SignalDuringQueries.
func SignalledLifecycle(t testing.TB, teardown time.Duration) *lameduck.Lifecycle {
	t.Helper()
	logs := &LogBuffer{}
	lc, err := lameduck.New(lameduck.Config{ShutdownTeardown: teardown, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	logs.LogOnFailure(t)
	return lc
}

// SignalDuringQueries starts lc (a SignalledLifecycle with a server at
// base), asks GET base+"/query?ctx="+name for each of names at once, waits
// until each handler has sent on started (its query has begun), then 100ms
// later sends SIGTERM to its own process, as the kubelet would. Each answer
// must be 200 with the name as its body (the query on that context ran to
// its end through the teardown); a wrong one fails t with t.Errorf. Then
// Run must return nil.
func SignalDuringQueries(t testing.TB, lc *lameduck.Lifecycle, base string, names []string, started <-chan string) {
	t.Helper()
	wait := lameducktest.Start(t, lc)
	answers := map[string]<-chan Fetched{}
	for _, name := range names {
		answers[name] = GoFetch(Client(t), "GET", base+"/query?ctx="+name)
	}
	for range names {
		Recv(t, started, "a query's start")
	}
	time.Sleep(100 * time.Millisecond) // the schedule under test: the signal 100ms into the 1s queries
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		a := Recv(t, answers[name], "the answer of the query on "+name).OK(t)
		if a.Code != 200 || a.Body != name {
			t.Errorf("the query on %s: %d %q; want 200 %q", name, a.Code, a.Body, name)
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

package ldnats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.Timeout(5*time.Second), nats.NoCallbacksAfterClientClose())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// The shared NATS server of this machine, with JetStream.
func TestCheckRealServer(t *testing.T) {
	srv := testsupport.NATS
	nc, err := nats.Connect(srv.Addr(), nats.Timeout(5*time.Second))
	if err != nil {
		srv.Missing(t, err)
	}
	t.Cleanup(nc.Close)
	r := testsupport.Serve(t,
		ldnats.Check(health.Check{Name: "bus", Critical: true}, nc),
		ldnats.CheckJetStream(health.Check{Name: "js", Critical: true}, nc))
	a := r.Probe(t)
	a.Want(t, "the shared NATS", 200, "ok", "bus", "ok")
	a.Want(t, "the shared NATS", 200, "ok", "js", "ok")
}

// embedded is a NATS server of the test's own, in process. It binds a
// port of its choosing each time it starts (server.RANDOM_PORT): a port
// handed to it, or kept across a restart, could be taken by another
// process meanwhile. A test that restarts it reaches it through a
// testsupport.Proxy, retargeted to the new port, where clients reconnect.
type embedded struct {
	t    testing.TB
	opts *server.Options
	s    *server.Server
}

func startEmbedded(t testing.TB, jetStream bool) *embedded {
	t.Helper()
	e := &embedded{t: t, opts: &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: jetStream, StoreDir: t.TempDir()}}
	e.start()
	t.Cleanup(e.stop)
	return e
}

// addr is the running server's "127.0.0.1:port".
func (e *embedded) addr() string { return e.s.Addr().String() }

func (e *embedded) url() string { return "nats://" + e.addr() }

func (e *embedded) start() {
	e.t.Helper()
	s, err := server.NewServer(e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		e.t.Fatal("embedded NATS server not ready within 10s")
	}
	e.s = s
}

func (e *embedded) stop() {
	if e.s != nil {
		e.s.Shutdown()
		e.s.WaitForShutdown()
		e.s = nil
	}
}

// reconnected waits until nc has reconnected since it had made before
// reconnects: nats.go notices a lost server and redials in the background
// (ReconnectWait 50ms here), and the check reports the connection's truth
// until it has.
func reconnected(t testing.TB, nc *nats.Conn, before uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for nc.Stats().Reconnects <= before || nc.Status() != nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatalf("nats.go did not reconnect within 10s: %s", nc.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An embedded server shut down and started again; behind a proxy of the
// test's own that stalls; JetStream asked for.
func TestFaults(t *testing.T) {
	var e *embedded
	var proxy *testsupport.Proxy
	var nc *nats.Conn
	testsupport.Faults{
		Check: func(t testing.TB, name string, critical bool) health.Check {
			e = startEmbedded(t, true)
			proxy = testsupport.NewProxy(t, e.addr())
			nc = connect(t, "nats://"+proxy.Addr())
			// The harness sets the Timeout.
			return ldnats.CheckJetStream(health.Check{Name: name, Critical: critical}, nc)
		},
		// The server shuts down, closing its connections; the proxy then
		// closes each new one at once, as it did when its dial of the dead
		// port failed, and never forwards to whatever process may take
		// that port meanwhile.
		Down: func(testing.TB) { e.stop(); proxy.Cut() },
		Up: func(t testing.TB) {
			before := nc.Stats().Reconnects
			if e.s == nil {
				e.start() // on a new port
				proxy.Retarget(e.addr())
			}
			proxy.Restore()
			reconnected(t, nc, before)
		},
		Stall: func(testing.TB) { proxy.Stall() },
	}.Run(t)
}

// A server without JetStream passes Check and fails CheckJetStream.
func TestJetStreamNotEnabled(t *testing.T) {
	e := startEmbedded(t, false)
	nc := connect(t, e.url())
	r := testsupport.Serve(t,
		ldnats.Check(health.Check{Name: "bus", Critical: true}, nc),
		ldnats.CheckJetStream(health.Check{Name: "js"}, nc))
	a := r.Probe(t)
	a.Want(t, "no JetStream", 200, "degraded", "bus", "ok")
	a.Want(t, "no JetStream", 200, "degraded", "js", "error")
}

// A closed connection is named.
func TestClosed(t *testing.T) {
	e := startEmbedded(t, false)
	nc := connect(t, e.url())
	nc.Close()
	err := ldnats.Check(health.Check{Name: "bus"}, nc).Func(context.Background())
	if err == nil || !strings.Contains(err.Error(), "CLOSED") {
		t.Fatalf("a closed connection: %v", err)
	}
	if ldnats.Check(health.Check{Name: "bus"}, nil).Func(context.Background()) == nil {
		t.Fatal("a nil connection passed")
	}
}

package ldnats_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/health"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A check of the bus and of JetStream, against a NATS server embedded in
// the process for the example. The bus is shared by every replica, so the
// check is not critical: a lost bus makes readiness "degraded" (still 200)
// instead of emptying the Service (docs/probes-and-shutdown.md, "When a
// check should be critical"). In a service, pass the check to
// Lifecycle.AddCheck instead of a Checker of its own:
//
//	lc.AddCheck(ldnats.CheckJetStream(health.Check{Name: "bus"}, nc))
func ExampleCheckJetStream() {
	dir, err := os.MkdirTemp("", "ldnats-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10e9) {
		log.Fatal("the embedded server did not start")
	}

	// nats.go reconnects by itself; the check reports RECONNECTING meanwhile.
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// A deadline of 10s rather than the default 1s: the example's server
	// shares the process, and a loaded machine can keep its JetStream
	// answer waiting past a second.
	c := health.NewChecker(health.CheckerOptions{})
	if err := c.AddCheck(ldnats.CheckJetStream(health.Check{Name: "bus", Timeout: 10 * time.Second}, nc)); err != nil {
		log.Fatal(err)
	}
	rep, err := c.Run(context.Background(), "", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Status, rep.Checks["bus"])

	nc.Close()
	rep, _ = c.Run(context.Background(), "", nil)
	fmt.Println(rep.Status, rep.Checks["bus"])
	// Output:
	// ok ok
	// degraded error: lameduck: nats: the connection is CLOSED, not CONNECTED (last server (none))
}

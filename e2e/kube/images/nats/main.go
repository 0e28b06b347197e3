// Command nats is the NATS server with JetStream that the cluster suite's
// runner test consumes from inside the cluster: nats-server's own server
// package, embedded, listening on :4222 and storing in /data, stopped
// cleanly on SIGTERM.
package main

import (
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	s, err := server.NewServer(&server.Options{Host: "0.0.0.0", Port: 4222, JetStream: true, StoreDir: "/data"})
	if err != nil {
		log.Fatal(err)
	}
	s.ConfigureLogger()
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		log.Fatal("nats: not ready for connections after 30s")
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
	s.Shutdown()
	s.WaitForShutdown()
}

// Command pause is the pod sandbox of lameduck's end-to-end cluster: it
// holds the pod's namespaces and blocks until SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

// Command lameduck runs lameduck's demo service and, later, its tools.
//
//	lameduck demo [--addr :8080] [--server http|fiber] [--startup-delay 0s] [--log-format text|json]
//	              [--simulate-check NAME=MODE[,critical]]... [--check-tcp|--check-http|--check-dns NAME=TARGET[,critical]]...
//
// The demo serves GET /, GET /slow?d=DURATION, POST /write, POST /loop,
// GET /ws (a WebSocket echo) and GET /events (server-sent events) behind the
// probes, and drains on SIGTERM exactly as a service built on lameduck
// would; --server fiber serves the same routes (all but /events) on a
// Fiber app through contrib/fiber. Every LAMEDUCK_* variable applies; see the README's configuration
// table and `lameduck demo --help`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes the command line and returns the process's exit code.
func run(args []string) int {
	root := &cobra.Command{
		Use:           "lameduck",
		Short:         "Probes that tell the truth and a shutdown that drops nothing, for Go services in Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionText(),
	}
	root.SetVersionTemplate("{{.Version}}")
	root.AddCommand(newDemoCommand(), newVersionCommand())
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		if _, logged := err.(exitError); !logged {
			fmt.Fprintln(os.Stderr, "lameduck:", err)
		}
		return 1
	}
	return 0
}

// exitError is an error that has already been logged; main only sets the
// exit code.
type exitError struct{ error }

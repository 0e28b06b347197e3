// Command lameduck runs lameduck's demo service and its tools.
//
//	lameduck demo [--addr :8080] [--server http|fiber] [--startup-delay 0s] [--startup-dial HOST:PORT] [--log-format text|json]
//	              [--simulate-check NAME=MODE[,critical]]... [--check-tcp|--check-http|--check-dns NAME=TARGET[,critical]]...
//	lameduck rollout [flags] -- COMMAND ARGS...   (docs/rollout.md)
//	lameduck vet [FILE|DIR|-]...                   (docs/vet.md)
//
// The demo serves GET /, GET /slow?d=DURATION, POST /write, POST /loop,
// GET /ws (a WebSocket echo) and GET /events (server-sent events) behind the
// probes, and drains on SIGTERM exactly as a service built on lameduck
// would; --server fiber serves the same routes on a
// Fiber app through contrib/fiber. Every LAMEDUCK_* variable applies; see the README's configuration
// table and `lameduck demo --help`.
//
//	lameduck demo-worker [--queue nats|amqp|postgres] [--name demo] [--probe-addr :9090] [--loops 1]
//	                     [--ack-wait 30s] [--max-deliver -1] [--epoch-source kv|table|static] [--epoch-poll 10s]
//	                     [--nats URL] [--embedded-addr 127.0.0.1:4223] [--store DIR]   (--queue nats)
//	                     [--amqp amqp://guest:guest@127.0.0.1:5672/]                  (--queue amqp)
//	                     [--postgres postgres://postgres@127.0.0.1:5432/test]          (--queue postgres)
//	lameduck demo-worker enqueue [--n 10] [--d 200ms] [--queue ...] [--name demo] [--nats|--amqp|--postgres URL]
//
// The demo worker consumes jobs from NATS JetStream (an embedded server when
// --nats is not given), a RabbitMQ quorum queue or a PostgreSQL table with
// lameduck's worker package: probes on :9090 that watch the consume loop,
// and a SIGTERM drain that loses no job. See docs/runners.md.
package main

import (
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
	root.AddCommand(newDemoCommand(), newDemoWorkerCommand(), newVersionCommand(), newRolloutCommand(), newVetCommand())
	return execute(root, args, os.Stderr)
}

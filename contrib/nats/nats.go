// Package ldnats holds lameduck's integrations for NATS through nats.go
// (github.com/nats-io/nats.go):
//
//   - readiness checks of a connection, with JetStream when asked:
//     [Check] and [CheckJetStream];
//   - for a runner (the worker package), a job source on a JetStream pull
//     consumer, [Source], whose jobs ([Job]) are kept in progress while
//     they run and handed back with a NAK, or re-published at their last
//     delivery so that a drain or a rollout never strands one; its fetches
//     tell an idle queue (the server's heartbeats) from a silent server
//     (worker.ErrNoReply), which liveness sees;
//   - a rollout-epoch store on a JetStream key-value bucket, [Epochs], a
//     worker.EpochSource that counts only the runners alive now.
//
// Import it as
//
//	import ldnats "github.com/lameduck/lameduck/contrib/nats"
//
// It is a module of its own, so importing it pulls nats.go and nothing else
// beyond lameduck's standard-library core. The operator's pages are
// docs/nats.md (the checks) and docs/runners.md (the runner) in the
// lameduck repository.
package ldnats

import (
	"context"
	"fmt"

	"github.com/lameduck/lameduck/health"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Check returns spec with its Func set to a check of nc, the application's
// connection: spec carries the name, Critical and Timeout (see
// health.Check), and any Func it holds is replaced. Register the result
// with Lifecycle.AddCheck.
//
// Each ping, in order:
//
//  1. reads nc.Status(): anything but CONNECTED fails at once, naming the
//     status ("RECONNECTING" while nats.go redials a lost server, "CLOSED"
//     after Close or when its reconnect attempts ran out); no I/O;
//  2. a round trip to the server, nc.FlushWithContext: a PING on the
//     connection the application already holds, answered by a PONG, under
//     the probe's context, so a server that accepts and never answers is
//     reported "timeout" at the check's deadline. Nothing is dialled.
//
// nats.go reconnects by itself: once the server is back and nc has
// reconnected, the next probe passes.
//
// Errors begin "lameduck: nats: " and carry nats.go's error; the server's
// URL, if named, has its credentials hidden (nats.go's redacted form). A nil
// nc makes every call return an error saying so. Safe for concurrent use,
// as nc is.
func Check(spec health.Check, nc *nats.Conn) health.Check {
	return check(spec, nc, false)
}

// CheckJetStream is [Check] plus a JetStream request: after the round trip
// it asks the JetStream API for the account's information
// (jetstream.JetStream.AccountInfo), under the probe's context. It fails
// when JetStream is not enabled for the account, has no quorum or does not
// answer in time, so a consumer or publisher that needs JetStream reports
// not ready while a plain NATS connection would pass.
func CheckJetStream(spec health.Check, nc *nats.Conn) health.Check {
	return check(spec, nc, true)
}

func check(spec health.Check, nc *nats.Conn, withJS bool) health.Check {
	if nc == nil {
		err := fmt.Errorf("lameduck: ldnats.Check(%q): the *nats.Conn is nil; pass the connection the application uses", spec.Name)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	var js jetstream.JetStream
	if withJS {
		var err error
		if js, err = jetstream.New(nc); err != nil { // no I/O; fails only on a nil or closed nc
			err = fmt.Errorf("lameduck: nats: JetStream: %w", err)
			spec.Func = func(context.Context) error { return err }
			return spec
		}
	}
	spec.Func = func(ctx context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("lameduck: nats: the connection is %s, not CONNECTED (last server %s)", st, server(nc))
		}
		if err := nc.FlushWithContext(ctx); err != nil {
			return fmt.Errorf("lameduck: nats: round trip to %s: %w", server(nc), err)
		}
		if js != nil {
			if _, err := js.AccountInfo(ctx); err != nil {
				return fmt.Errorf("lameduck: nats: JetStream account info: %w", err)
			}
		}
		return nil
	}
	return spec
}

// server names the server nc is (or was last) connected to, without
// credentials.
func server(nc *nats.Conn) string {
	if u := nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	return "(none)"
}

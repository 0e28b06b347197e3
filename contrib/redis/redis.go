// Package ldredis is a lameduck readiness check for Redis through
// go-redis v9 (github.com/redis/go-redis/v9).
//
// Import it as
//
//	import ldredis "github.com/lameduck/lameduck/contrib/redis"
//
// It is a module of its own, so a service that imports it pulls go-redis
// and nothing else beyond lameduck's standard-library core. The operator's
// page is docs/redis.md in the lameduck repository.
package ldredis

import (
	"context"
	"errors"
	"fmt"

	"github.com/lameduck/lameduck/health"
	"github.com/redis/go-redis/v9"
)

// Check returns spec with its Func set to a PING of client: spec carries
// the name, Critical and Timeout (see health.Check), and any Func it holds
// is replaced. Register the result with Lifecycle.AddCheck.
//
// The ping takes a connection from client's pool (go-redis dials only when
// the pool has no healthy idle connection, never once per probe) and
// passes the probe's context, so it carries the check's deadline. go-redis
// applies that deadline to the connection only when the client's
// Options.ContextTimeoutEnabled is true; otherwise its ReadTimeout (3s by
// default) bounds a ping to a server that accepts and never answers, and
// the probe reports "timeout" at the check's deadline, then "stalled"
// until the ping returns (one goroutine, never one per probe). Set
// ContextTimeoutEnabled, or a ReadTimeout below the check's deadline.
//
// Errors: the ping's error, prefixed "lameduck: redis PING: " (a refused
// dial names the address, a server error its text: "NOAUTH ...",
// "LOADING ..."); the health engine redacts credentials before it reaches
// a body. A nil client makes every call return an error saying so. Safe
// for concurrent use, as client is.
func Check(spec health.Check, client redis.UniversalClient) health.Check {
	if client == nil {
		err := fmt.Errorf("lameduck: ldredis.Check(%q): the client is nil; pass the redis.UniversalClient the application uses", spec.Name)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	spec.Func = func(ctx context.Context) error {
		if err := client.Ping(ctx).Err(); err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return fmt.Errorf("lameduck: redis PING: the client is closed: %w", err)
			}
			return fmt.Errorf("lameduck: redis PING: %w", err)
		}
		return nil
	}
	return spec
}

package ldredis_test

import (
	"context"
	"log"
	"time"

	"github.com/lameduck/lameduck"
	ldredis "github.com/lameduck/lameduck/contrib/redis"
	"github.com/lameduck/lameduck/health"
	"github.com/redis/go-redis/v9"
)

// A degraded check of the cache: while Redis is down /readyz stays 200
// "degraded", so an outage of a Redis every replica shares never empties
// the Service. ContextTimeoutEnabled lets the check's 500ms deadline reach
// the connection.
func ExampleCheck() {
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	if err := lc.AddCheck(ldredis.Check(health.Check{Name: "cache", Timeout: 500 * time.Millisecond}, client)); err != nil {
		log.Fatal(err)
	}
	_ = lc.AddCloser("redis", func(ctx context.Context) error { return client.Close() })
}

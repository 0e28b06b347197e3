package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" driver of --check-mysql
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	ldmysql "github.com/lameduck/lameduck/contrib/mysql"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	ldredis "github.com/lameduck/lameduck/contrib/redis"
	"github.com/lameduck/lameduck/health"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// contribFlags are the demo's flags for the contrib modules' checks, each
// repeatable NAME=TARGET[,critical].
type contribFlags struct {
	postgres []string // NAME=DSN: a pgx pool
	mysql    []string // NAME=DSN: database/sql with go-sql-driver/mysql
	redis    []string // NAME=HOST:PORT
	nats     []string // NAME=URL
	amqp     []string // NAME=URL
}

// add builds the clients and their checks, registers them with lc, and
// registers each client's closer. Clients connect lazily (or, for NATS,
// retry in the background), so a dependency that is down at start is a
// failing check, not a failed start. The error names the flag, the value
// (credentials hidden) and the fix.
func (f contribFlags) add(lc *lameduck.Lifecycle) error {
	var errs []error
	each := func(flag string, specs []string, build func(spec health.Check, target string) (health.Check, func() error, error)) {
		for _, s := range specs {
			name, target, critical, err := splitSpec(s, true) // lax: a DSN or URL may hold commas
			if err == nil {
				var c health.Check
				var closer func() error
				c, closer, err = build(health.Check{Name: name, Critical: critical}, target)
				if err == nil {
					err = lc.AddCheck(c)
				}
				if err == nil && closer != nil {
					err = lc.AddCloser(flag+" "+name, func(context.Context) error { return closer() })
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("--%s=%q: %w", flag, health.Redact(s), err))
			}
		}
	}
	each("check-postgres", f.postgres, func(spec health.Check, dsn string) (health.Check, func() error, error) {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return spec, nil, errors.New("want a PostgreSQL URL or DSN, such as db=postgres://app@127.0.0.1:5432/app?connect_timeout=2")
		}
		if cfg.ConnConfig.ConnectTimeout == 0 {
			cfg.ConnConfig.ConnectTimeout = 2 * time.Second // see ldpgx.Check
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects lazily
		if err != nil {
			return spec, nil, err
		}
		return ldpgx.Check(spec, pool), func() error { pool.Close(); return nil }, nil
	})
	each("check-mysql", f.mysql, func(spec health.Check, dsn string) (health.Check, func() error, error) {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return spec, nil, errors.New("want a go-sql-driver/mysql DSN, such as db=root@tcp(127.0.0.1:3306)/test?timeout=2s")
		}
		return ldmysql.Check(spec, db), db.Close, nil
	})
	if len(f.redis) > 0 {
		// go-redis prints its own lines (a pool that cannot dial) in plain
		// text on stderr; this routes them through the process's handler,
		// so --log-format json stays JSON. Process-wide, as go-redis' logger is.
		redis.SetLogger(ldredis.NewLogger(lc.Config().Logger))
	}
	each("check-redis", f.redis, func(spec health.Check, addr string) (health.Check, func() error, error) {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return spec, nil, errors.New("want HOST:PORT, such as cache=127.0.0.1:6379")
		}
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		return ldredis.Check(spec, client), client.Close, nil
	})
	each("check-nats", f.nats, func(spec health.Check, rawURL string) (health.Check, func() error, error) {
		if u, err := url.Parse(rawURL); err != nil || u.Host == "" {
			return spec, nil, errors.New("want a NATS URL, such as bus=nats://127.0.0.1:4222")
		}
		nc, err := nats.Connect(rawURL, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second), nats.Timeout(2*time.Second))
		if err != nil {
			return spec, nil, err
		}
		return ldnats.Check(spec, nc), func() error { nc.Close(); return nil }, nil
	})
	each("check-amqp", f.amqp, func(spec health.Check, rawURL string) (health.Check, func() error, error) {
		if _, err := amqp.ParseURI(rawURL); err != nil {
			return spec, nil, errors.New("want an AMQP URL, such as broker=amqp://guest:guest@127.0.0.1:5672/")
		}
		c, closer := ldamqp.DialCheck(spec, rawURL, amqp.Config{})
		return c, closer, nil
	})
	return errors.Join(errs...)
}

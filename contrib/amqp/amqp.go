// Package ldamqp connects lameduck to RabbitMQ (AMQP 0-9-1) through
// amqp091-go (github.com/rabbitmq/amqp091-go): readiness checks of a
// connection ([Check], [DialCheck]), and a runner's job source on a quorum
// queue ([Source], [DeclareQueue]) that loses no job at a drain, a
// failure or a hand-back.
//
// Import it as
//
//	import ldamqp "github.com/lameduck/lameduck/contrib/amqp"
//
// It is a module of its own, so importing it pulls amqp091-go and nothing
// else beyond lameduck's standard-library core. The operator's page is
// docs/amqp.md in the lameduck repository.
package ldamqp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/lameduck/lameduck/health"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Check returns spec with its Func set to a check of conn, the
// application's connection: spec carries the name, Critical and Timeout
// (see health.Check), and any Func it holds is replaced. Register the
// result with Lifecycle.AddCheck.
//
// Each ping fails at once when conn is closed (the server went away, a
// heartbeat was missed, or the application closed it), then opens a
// channel on conn and closes it again: a round trip that proves the broker
// answers on this connection. It never dials; amqp091-go does not
// reconnect, so once conn is closed the check fails until the application
// replaces it (see [DialCheck] for a check that keeps a connection of its
// own).
//
// amqp091-go's Channel takes no context: against a broker that accepts and
// never answers, the ping cannot be interrupted. The probe reports
// "timeout" at the check's deadline and "stalled" afterwards, with that one
// ping's goroutine held until the broker answers or the connection's
// heartbeat (10s by default) declares it dead; never one goroutine per
// probe.
//
// Errors begin "lameduck: amqp: " and carry amqp091-go's error (its
// connection errors carry no URL). A nil conn makes every call return an
// error saying so. Safe for concurrent use.
func Check(spec health.Check, conn *amqp.Connection) health.Check {
	if conn == nil {
		err := fmt.Errorf("lameduck: ldamqp.Check(%q): the *amqp.Connection is nil; pass the connection the application uses", spec.Name)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	spec.Func = func(ctx context.Context) error { return ping(ctx, conn) }
	return spec
}

// ping opens and closes a channel on conn.
func ping(ctx context.Context, conn *amqp.Connection) error {
	if conn.IsClosed() {
		return errors.New("lameduck: amqp: the connection is closed")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("lameduck: amqp: open a channel: %w", err)
	}
	if err := ch.Close(); err != nil {
		return fmt.Errorf("lameduck: amqp: close the channel: %w", err)
	}
	return nil
}

// DialCheck returns spec with its Func set to a check that keeps one AMQP
// connection of its own to rawURL (an amqp:// or amqps:// URL, as for
// amqp.Dial) and pings it as [Check] does. The connection is dialled by
// the first probe, and again only by a probe that finds it closed, never
// once per probe; the dial (TCP, TLS and the AMQP handshake) is bounded by
// the probe's deadline. cfg is passed to amqp.DialConfig; its Dial, if set,
// is replaced.
//
// Because the connection is the check's own, a ping that is still waiting
// for the broker when the probe's deadline passes closes it: the ping
// returns, the probe reports "timeout", and the next probe redials; a
// broker that accepts and never answers costs no captive goroutine.
//
// Use it when the application's own connection is not at hand, or to check
// the broker independently of it. Call the returned close function after
// the last probe (Lifecycle.AddCloser): it closes the connection, and
// every later ping fails saying so.
//
// A malformed URL makes every call return an error naming it, with its
// password hidden. Errors begin "lameduck: amqp: ".
func DialCheck(spec health.Check, rawURL string, cfg amqp.Config) (health.Check, func() error) {
	if _, err := amqp.ParseURI(rawURL); err != nil {
		shown := "(unparsable)"
		if u, perr := url.Parse(rawURL); perr == nil {
			shown = u.Redacted()
		}
		err = fmt.Errorf("lameduck: ldamqp.DialCheck(%q): %w; use a URL such as amqp://user:password@rabbitmq:5672/", shown, err)
		spec.Func = func(context.Context) error { return err }
		return spec, func() error { return nil }
	}
	d := &dialed{url: rawURL, cfg: cfg}
	spec.Func = d.ping
	return spec, d.close
}

// dialed is DialCheck's connection.
type dialed struct {
	url string
	cfg amqp.Config

	mu     sync.Mutex
	conn   *amqp.Connection // guarded by mu; nil before the first dial
	closed bool             // guarded by mu: close was called
}

func (d *dialed) ping(ctx context.Context) error {
	d.mu.Lock()
	conn, closed := d.conn, d.closed
	d.mu.Unlock()
	if closed {
		return errors.New("lameduck: amqp: the check's connection was closed at shutdown")
	}
	if conn == nil || conn.IsClosed() {
		timeout := 30 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		if timeout <= 0 {
			return context.DeadlineExceeded
		}
		cfg := d.cfg
		cfg.Dial = amqp.DefaultDial(timeout) // bounds the dial and the handshake
		var err error
		if conn, err = amqp.DialConfig(d.url, cfg); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("lameduck: amqp: dial: %w", err)
		}
		d.mu.Lock()
		if d.closed { // closed while dialling
			d.mu.Unlock()
			_ = conn.Close()
			return errors.New("lameduck: amqp: the check's connection was closed at shutdown")
		}
		d.conn = conn
		d.mu.Unlock()
	}
	// The connection is the check's own: when the probe's deadline passes
	// with the ping still waiting for the broker, close it (the close
	// handshake bounded by closeWait), which ends the wait, so the ping
	// honours its context; the next probe redials.
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now().Add(closeWait)) })
	err := ping(ctx, conn)
	stop()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// closeWait bounds the AMQP close handshake of a connection DialCheck
// closes because a ping outlived its deadline: short, so the ping returns
// well within the health engine's 100ms of slack and is not held captive.
const closeWait = 20 * time.Millisecond

func (d *dialed) close() error {
	d.mu.Lock()
	conn := d.conn
	d.closed, d.conn = true, nil
	d.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	return conn.Close()
}

package ldamqp_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// live returns the shared broker's URL once it answers, or skips (fails
// under CI).
func live(t testing.TB) *url.URL {
	t.Helper()
	srv := testsupport.RabbitMQ
	conn, err := amqp.DialConfig(srv.Addr(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		srv.Missing(t, err)
	}
	conn.Close()
	u, err := url.Parse(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The application's connection to the shared broker, then closed.
func TestCheckRealServer(t *testing.T) {
	u := live(t)
	conn, err := amqp.Dial(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	dc, closeDC := ldamqp.DialCheck(health.Check{Name: "dialed", Critical: true}, u.String(), amqp.Config{})
	t.Cleanup(func() { closeDC() })
	r := testsupport.Serve(t, ldamqp.Check(health.Check{Name: "broker", Critical: true}, conn), dc)
	for range 3 {
		a := r.Probe(t)
		a.Want(t, "the shared RabbitMQ", 200, "ok", "broker", "ok")
		a.Want(t, "the shared RabbitMQ", 200, "ok", "dialed", "ok")
	}
	conn.Close()
	r.Probe(t).Want(t, "a closed connection", 503, "failed", "broker", "error")
}

// The shared broker behind a proxy of the test's own: cut, stalled,
// restored. DialCheck redials after the outage.
func TestFaults(t *testing.T) {
	base := live(t)
	f := testsupport.ProxiedFaults(base.Host, func(t testing.TB, name string, critical bool, addr string) health.Check {
		u := *base
		u.Host = addr
		// The harness sets the Timeout.
		c, closeC := ldamqp.DialCheck(health.Check{Name: name, Critical: critical}, u.String(), amqp.Config{})
		t.Cleanup(func() { closeC() })
		return c
	})
	f.Secrets = []string{base.User.String()}
	f.Run(t)
}

func TestBadInput(t *testing.T) {
	if ldamqp.Check(health.Check{Name: "b"}, nil).Func(context.Background()) == nil {
		t.Fatal("a nil connection passed")
	}
	c, closeC := ldamqp.DialCheck(health.Check{Name: "b"}, "http://u:hunter2@host/", amqp.Config{})
	defer closeC()
	err := c.Func(context.Background())
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a malformed URL: %v", err)
	}
}

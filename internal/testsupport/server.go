package testsupport

import (
	"os"
	"testing"
)

// Server names one of the servers this machine runs for the integration
// tests: the environment variable that overrides its address, the default,
// and the command that starts it when it is down.
type Server struct {
	Name, EnvVar, Default, Start string
}

// The servers of this machine. The variables do not use the LAMEDUCK_
// prefix, which lameduck itself reads and refuses unknown names of.
var (
	Postgres = Server{"PostgreSQL", "LDTEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"}
	MySQL = Server{"MariaDB", "LDTEST_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test",
		"start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"}
	Redis = Server{"Redis", "LDTEST_REDIS_ADDR", "127.0.0.1:6379",
		`redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log`}
	RabbitMQ = Server{"RabbitMQ", "LDTEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", "rabbitmq-server -detached"}
	NATS     = Server{"NATS", "LDTEST_NATS_URL", "nats://127.0.0.1:4222",
		"start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"}
)

// Addr returns the server's address: the environment variable, or the
// default.
func (s Server) Addr() string {
	if v := os.Getenv(s.EnvVar); v != "" {
		return v
	}
	return s.Default
}

// Missing skips t because the server did not answer (err), or fails it
// when CI is set: CI must never pass by skipping.
func (s Server) Missing(t testing.TB, err error) {
	t.Helper()
	msg := s.Name + " at " + s.EnvVar + "=" + s.Addr() + " did not answer (" + err.Error() + "); set " + s.EnvVar + " or start it: " + s.Start
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

package ldredis_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	ldredis "github.com/lameduck/lameduck/contrib/redis"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/contribtest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The shared server on this machine answers.
func TestCheckRealServer(t *testing.T) {
	srv := contribtest.Redis
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		srv.Missing(t, err)
	}
	r := contribtest.Serve(t, ldredis.Check(health.Check{Name: "cache", Critical: true}, client))
	r.Probe(t).Want(t, "the shared Redis", 200, "ok", "cache", "ok")
}

// privateRedis is a redis-server of the test's own, on a free port, that
// the test kills, restarts, stops (SIGSTOP) and continues.
type privateRedis struct {
	t       testing.TB
	port    int
	cmd     *exec.Cmd
	stopped bool
}

func startPrivate(t testing.TB) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		contribtest.Redis.Missing(t, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &privateRedis{t: t, port: ln.Addr().(*net.TCPAddr).Port}
	ln.Close()
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *privateRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

func (p *privateRedis) start() {
	p.t.Helper()
	p.cmd = exec.Command("redis-server", "--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--requirepass", "hunter2", "--loglevel", "warning")
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", p.addr())
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("private redis-server on %s did not listen within 10s: %v", p.addr(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *privateRedis) kill() {
	if p.cmd == nil {
		return
	}
	if p.stopped {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.stopped = false
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// A killed and restarted Redis, and a stopped one (SIGSTOP: the kernel
// still accepts connections, nothing answers).
func TestFaults(t *testing.T) {
	var p *privateRedis
	var client *redis.Client
	contribtest.Faults{
		Check: func(t testing.TB, name string, critical bool) health.Check {
			p = startPrivate(t)
			client = redis.NewClient(&redis.Options{Addr: p.addr(), Password: "hunter2"})
			t.Cleanup(func() { client.Close() })
			return ldredis.Check(health.Check{Name: name, Critical: critical, Timeout: time.Second}, client)
		},
		Down: func(testing.TB) { p.kill() },
		Up: func(testing.TB) {
			if p.stopped {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				p.stopped = false
				return
			}
			p.start()
		},
		Stall: func(t testing.TB) {
			if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			p.stopped = true
		},
		Secrets: []string{"hunter2"},
		// go-redis retries a refused dial (DialerRetries, MaxRetries)
		// until the deadline.
		OutageWord: "error|timeout",
	}.Run(t)
}

func TestNilClient(t *testing.T) {
	err := ldredis.Check(health.Check{Name: "cache"}, nil).Func(context.Background())
	if err == nil {
		t.Fatal("a nil client passed")
	}
}

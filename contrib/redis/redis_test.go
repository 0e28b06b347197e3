package ldredis_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	ldredis "github.com/lameduck/lameduck/contrib/redis"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The shared server on this machine answers.
func TestCheckRealServer(t *testing.T) {
	srv := testsupport.Redis
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		srv.Missing(t, err)
	}
	r := testsupport.Serve(t, ldredis.Check(health.Check{Name: "cache", Critical: true}, client))
	r.Probe(t).Want(t, "the shared Redis", 200, "ok", "cache", "ok")
}

// privateRedis is a redis-server of the test's own that the test kills,
// restarts, stops (SIGSTOP) and continues. It listens on a Unix socket in
// a directory of the test's own, not on a TCP port: a port freed by the
// kill could be taken by another process (another test binary binding
// 127.0.0.1:0) before the restart binds it again, and the client would
// then talk to that process, or the restart fail. The socket's path is
// the test's alone, and a killed server leaves its socket file, so a dial
// meanwhile is refused, as a TCP dial to a dead port is.
type privateRedis struct {
	t       testing.TB
	sock    string
	cmd     *exec.Cmd
	exited  chan error // the result of cmd.Wait
	out     *testsupport.LogBuffer
	stopped bool
}

func startPrivate(t testing.TB) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testsupport.Redis.Missing(t, err)
	}
	// A short path: a Unix socket's is limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "ldredis")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &privateRedis{t: t, sock: filepath.Join(dir, "redis.sock"), out: &testsupport.LogBuffer{}}
	t.Cleanup(p.kill) // runs before the directory's removal
	p.start()
	return p
}

// client returns a client of the private server, closed in t's cleanup.
func (p *privateRedis) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: p.sock, Password: "hunter2"})
	t.Cleanup(func() { c.Close() })
	return c
}

func (p *privateRedis) start() {
	p.t.Helper()
	p.cmd = exec.Command("redis-server", "--port", "0", "--unixsocket", p.sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--requirepass", "hunter2", "--loglevel", "warning")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan<- error) { exited <- cmd.Wait() }(p.cmd, p.exited)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", p.sock)
		if err == nil {
			c.Close()
			return
		}
		select {
		case werr := <-p.exited:
			p.cmd = nil
			p.t.Fatalf("private redis-server on %s exited before it listened (%v):\n%s", p.sock, werr, p.out)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("private redis-server on %s did not listen within 10s: %v\n%s", p.sock, err, p.out)
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
	select {
	case <-p.exited:
	case <-time.After(testsupport.Guard):
		p.t.Errorf("private redis-server (pid %d) did not exit within %s of SIGKILL", p.cmd.Process.Pid, testsupport.Guard)
	}
	p.cmd = nil
}

// A killed and restarted Redis, and a stopped one (SIGSTOP: the kernel
// still accepts connections, nothing answers).
func TestFaults(t *testing.T) {
	var p *privateRedis
	testsupport.Faults{
		Check: func(t testing.TB, name string, critical bool) health.Check {
			p = startPrivate(t)
			client := p.client(t)
			// The harness sets the Timeout.
			return ldredis.Check(health.Check{Name: name, Critical: critical}, client)
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

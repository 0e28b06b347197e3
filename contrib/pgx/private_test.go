package ldpgx_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck/internal/testsupport"
)

// private is a PostgreSQL server of the test's own, for a test that
// restarts its server: the shared one is never restarted. It runs from a
// temporary data directory (fsync off: nothing here must survive the
// machine), listens on 127.0.0.1 at a free port and on a socket in that
// directory, trusts every local connection, and is stopped and removed in
// the test's cleanup.
type private struct {
	bin, dir string
	port     int
	asUser   []string // runuser -u postgres --, when the test runs as root (initdb refuses root)
}

// startPrivate starts a private server, or returns nil, with the reason,
// when this machine cannot (no PostgreSQL binaries; root without a
// postgres user).
func startPrivate(t testing.TB) (*private, string) {
	t.Helper()
	bin := os.Getenv("LDTEST_POSTGRES_BIN")
	if bin == "" {
		out, err := exec.Command("pg_config", "--bindir").Output()
		if err == nil {
			bin = strings.TrimSpace(string(out))
		}
		if _, err := os.Stat(filepath.Join(bin, "initdb")); bin == "" || err != nil {
			matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
			if len(matches) == 0 {
				return nil, "no initdb found (set LDTEST_POSTGRES_BIN to PostgreSQL's bin directory)"
			}
			bin = filepath.Dir(matches[len(matches)-1])
		}
	}
	p := &private{bin: bin}
	dir, err := os.MkdirTemp("", "ldpgx-private-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p.dir = filepath.Join(dir, "data")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, "running as root, and there is no postgres user to run initdb as"
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := p.run(60*time.Second, "initdb", "-D", p.dir, "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	for try := 0; ; try++ {
		p.port = testsupport.FreePort(t)
		out, err := p.pgctl("start", "-l", filepath.Join(dir, "log"), "-o",
			fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", p.port, dir))
		if err == nil {
			break
		}
		if try == 2 { // another process took the port three times running
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
		}
	}
	t.Cleanup(func() { _, _ = p.pgctl("stop", "-m", "immediate") })
	return p, ""
}

// dsn is the private server's DSN.
func (p *private) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// addr is its host:port.
func (p *private) addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// restart stops the server (its sessions ended, its data kept) and starts
// it again on the same port, returning once it accepts connections.
func (p *private) restart(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	out, err := p.pgctl("restart", "-m", "fast", "-l", filepath.Join(filepath.Dir(p.dir), "log"),
		"-t", strconv.Itoa(max(1, int(time.Until(deadline).Seconds()))))
	if err != nil {
		return fmt.Errorf("pg_ctl restart: %w: %s", err, out)
	}
	return nil
}

func (p *private) pgctl(args ...string) ([]byte, error) {
	return p.run(60*time.Second, "pg_ctl", append([]string{"-D", p.dir, "-w"}, args...)...)
}

func (p *private) run(bound time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	argv := append(append(append([]string(nil), p.asUser...), filepath.Join(p.bin, name)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = os.TempDir()
	cmd.WaitDelay = time.Second // a server started without -l holds the output pipe: do not wait for it
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return out, err
}

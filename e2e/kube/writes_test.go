package kube_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lameduck/lameduck/e2e/kube/cluster"
)

// auditDB is the host's PostgreSQL database the pods' audit rows go to, a
// database of the suite's own so that no other test's table is touched.
const auditDB = "lameduck_e2e"

// auditWrite is how long the test makes every audit row take, in the
// database (a trigger that sleeps): a write behind the answer that is
// still running when a pod is told to stop, as a write to a remote audit
// service would be.
const auditWrite = 100 * time.Millisecond

// TestAuditRowsBesideControls is "nothing lost behind the
// answer" on the real engine: every 2xx answer to GET / and POST /echo is
// followed by an audit row in PostgreSQL, written after the answer (each
// takes auditWrite). lameduck's chart runs the demo with --audit-postgres
// (the row through GoWrite, joined at the teardown); the controls write
// the same row as a handler does without lameduck, in a goroutine nothing
// joins: the hand-written lame duck and Go's default server with
// `preStop: sleep 5`. Each takes an HTTP/1.1 keep-alive load of controlRate
// requests a second through its Service, every request named by an
// X-Request-Id, through two rolling restarts; then, the load over, the
// Deployment is scaled to zero so that every row is written or lost.
//
// lameduck must fail no request and leave no answered request without its
// row; the controls' missing rows are reported, and together they must
// miss some, or the test could not see a lost write. The host's
// PostgreSQL listens on loopback only: socat forwards the node's address
// to it.
func TestAuditRowsBesideControls(t *testing.T) {
	needCluster(t)
	dsn := auditDatabase(t)
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	surge := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}}
	naive := func(mode string, sleep int64) func(e *env) string {
		return func(e *env) string {
			e.deployNaiveAs("naive", naiveShape{Replicas: 3, PreStopSleep: sleep, Mode: mode, Strategy: surge,
				Env: []corev1.EnvVar{{Name: "NAIVE_AUDIT_POSTGRES", Value: dsn}}})
			return "naive"
		}
	}
	cs := []contender{
		{"lameduck (the chart, demo --audit-postgres)", "audit-lameduck", true, "demo", func(e *env) string {
			e.helmInstall("lameduck-demo", map[string]any{"extraArgs": []any{"--audit-postgres=" + dsn}})
			return "lameduck-demo"
		}},
		{"hand-written lame duck (503, sleep 5s, Shutdown)", "audit-handwritten", false, "naive", naive("handwritten", 0)},
		{"Go's default server + preStop sleep 5s", "audit-prestop-sleep", false, "naive", naive("", 5)},
	}
	var mu sync.Mutex
	missing := map[string]int{}
	t.Run("contenders", func(t *testing.T) {
		for _, c := range cs {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				n := auditContender(t, c)
				mu.Lock()
				missing[c.name] = n
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	controls := 0
	for _, c := range cs[1:] {
		controls += missing[c.name]
	}
	t.Logf("answered requests without their audit row: %v", missing)
	if controls == 0 {
		t.Errorf("no control lost an audit row: the test cannot see a lost write")
	}
}

// auditContender deploys c, runs a named keep-alive load through two
// rolling restarts, and returns how many answered requests have no row.
func auditContender(t *testing.T, c contender) int {
	e := newEnv(t, c.slug)
	name := c.deploy(e)
	url := e.serviceURL(name)
	prefix := e.ns + "/"
	l := startNamedLoad(url, controlRate, keepAlive, prefix)
	time.Sleep(2 * time.Second) // load before the first restart
	for i := range 2 {
		from := time.Now()
		e.restart(name)
		e.waitRolledOut(name, 4*time.Minute)
		t.Logf("%s: rolling restart %d done in %.1fs", name, i+1, time.Since(from).Seconds())
	}
	time.Sleep(2 * time.Second) // load after the last old pod left
	r := l.finish()
	// Then every pod leaves, so each has written its rows or never will:
	// lameduck's joined at the teardown, a control's cut at its exit.
	e.scale(name, 0)
	e.waitRolledOut(name, 2*time.Minute)
	rows := auditRows(t, prefix)
	lost, extra := 0, 0
	var examples []string
	for id := range r.Answered {
		if !rows[id] {
			lost++
			if len(examples) < 5 {
				examples = append(examples, id)
			}
		}
	}
	for id := range rows {
		if !r.Answered[id] {
			extra++
		}
	}
	t.Logf("%s: %s; %d answered 2xx, %d rows, %d answered without a row (e.g. %q), %d rows without a 2xx answer",
		c.name, r, len(r.Answered), len(rows), lost, examples, extra)
	if len(r.Answered) < controlRate*20 {
		t.Errorf("only %d requests answered: the load did not run", len(r.Answered))
	}
	if c.lameduck {
		if r.Failed-r.LateFailed != 0 || r.Resent-r.LateResent != 0 {
			t.Errorf("%s: %d requests failed and %d were re-sent (%d and %d written after the server closed the connection), want 0 besides those; examples: %q",
				c.name, r.Failed, r.Resent, r.LateFailed, r.LateResent, r.Examples)
		}
		if lost != 0 {
			t.Errorf("%s: %d answered requests have no audit row, want 0: a write behind the answer was lost", c.name, lost)
		}
	}
	return lost
}

// auditDatabase makes the suite's database on the host's PostgreSQL (over
// loopback, trust), its unlogged audit table with a trigger that makes
// every row take auditWrite, and a socat forwarder from the node's address
// to the server, stopped when the test ends; it returns the URL the pods
// use.
func auditDatabase(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	if err != nil {
		t.Fatalf("the host's PostgreSQL on 127.0.0.1:5432 (start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", err)
	}
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, auditDB).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		if _, err := admin.Exec(ctx, `CREATE DATABASE `+auditDB); err != nil {
			t.Fatal(err)
		}
	}
	admin.Close(ctx)
	db, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/"+auditDB+"?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, q := range []string{
		`CREATE UNLOGGED TABLE IF NOT EXISTS lameduck_audit (request_id text NOT NULL, pod text NOT NULL,
			method text NOT NULL, path text NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
		`CREATE INDEX IF NOT EXISTS lameduck_audit_request_id ON lameduck_audit (request_id text_pattern_ops)`,
		fmt.Sprintf(`CREATE OR REPLACE FUNCTION lameduck_audit_slow() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN PERFORM pg_sleep(%g); RETURN NEW; END $$`, auditWrite.Seconds()),
		`CREATE OR REPLACE TRIGGER lameduck_audit_slow BEFORE INSERT ON lameduck_audit
			FOR EACH ROW EXECUTE FUNCTION lameduck_audit_slow()`,
		`DELETE FROM lameduck_audit WHERE at < now() - interval '1 day'`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	addr := startSocat(t, "127.0.0.1:5432")
	// At most 8 connections a pod: a pod takes about a third of the load,
	// 33 rows a second of auditWrite each, 3 or 4 at once.
	return "postgres://postgres@" + addr + "/" + auditDB + "?sslmode=disable&pool_max_conns=8"
}

// auditRows is the request ids of the audit rows whose id starts with prefix.
func auditRows(t *testing.T, prefix string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/"+auditDB+"?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `SELECT request_id FROM lameduck_audit WHERE request_id LIKE $1`, prefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// startSocat forwards a port of the node's address (reachable from pods)
// to target on the host, in a process of its own (Debian's socat, one
// process per connection), stopped when the test ends. It returns the
// address the pods dial.
func startSocat(t *testing.T, target string) string {
	t.Helper()
	bin, err := exec.LookPath("socat")
	if err != nil {
		t.Fatalf("socat: %v (the cluster's `kubecluster up` installs Debian's socat)", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(cluster.NodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr := net.JoinHostPort(cluster.NodeIP, strconv.Itoa(port))
	proc := startHostProcess(t, "socat", t.TempDir(), syscall.SIGTERM,
		exec.Command(bin, fmt.Sprintf("TCP-LISTEN:%d,bind=%s,reuseaddr,fork", port, cluster.NodeIP), "TCP:"+target))
	waitUntil(t, 10*time.Second, "socat listening on "+addr, func() error {
		if err := proc.exitedErr(); err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return addr
}

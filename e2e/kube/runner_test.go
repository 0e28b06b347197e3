package kube_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lameduck/lameduck/e2e/kube/cluster"
)

// The runner test's load: per round of restart, a batch of jobs enqueued
// first, so that the round's SIGTERMs find jobs in flight and a backlog.
const (
	runnerRounds  = 2               // rolling restarts per case
	runnerBatch   = 10              // jobs enqueued before each round
	runnerJobTime = 3 * time.Second // how long each job runs
)

// TestRunnerRollingRestartsLoseNoJob: the chart's runner (`lameduck
// demo-worker`, two replicas) on each of its job sources — NATS JetStream
// in a server inside the cluster, the host's RabbitMQ and PostgreSQL
// reached from the pods at the node IP — restarted twice mid-job in both
// drain modes, with a backlog: every job enqueued is done at least once
// (none lost), as the runner pods' own logs say; duplicates (a job done
// twice) are counted and reported; for RabbitMQ and PostgreSQL the queue
// is counted too, and must hold nothing once every job is done. The pods'
// logs are also the timing source: each drain's length and what it held
// at the signal are read from the draining and stopped lines.
//
// The six cases run at once, each in a namespace and a queue of its own:
// their time is spent waiting on the kubelet's probes and the jobs, not
// on the CPU. Each is a subtest started from a goroutine of its own
// rather than a t.Parallel one, which `go test` would run only -parallel
// (GOMAXPROCS, 2 here) at a time: three waves instead of one.
func TestRunnerRollingRestartsLoseNoJob(t *testing.T) {
	needCluster(t)
	bin := lameduckBin(t)
	var wg sync.WaitGroup
	for _, queue := range []string{"nats", "amqp", "postgres"} {
		for _, mode := range []string{"complete", "interrupt"} {
			wg.Go(func() {
				t.Run(queue+"/"+mode, func(t *testing.T) { testRunnerRollingRestarts(t, bin, queue, mode) })
			})
		}
	}
	wg.Wait()
}

func testRunnerRollingRestarts(t *testing.T, bin, queue, mode string) {
	name := fmt.Sprintf("kube_%s_%s_%d", queue, mode, time.Now().UnixNano()%1e9) // the queue's --name
	worker := map[string]any{"enabled": true, "replicaCount": 2, "queue": queue, "name": name, "drainMode": mode,
		// a bound well inside the test's time, and the grace derived from it
		"drainTimeoutSeconds": 60, "checkpointMarginSeconds": 15}
	var where []string // the flags of enqueue, run on the host
	var left func() (jobs, dead int)
	// The host's servers come first: their forwarders and the queue's
	// removal are cleaned up after the namespace's pods are gone (cleanups
	// run in reverse), so a draining pod still reaches its queue.
	switch queue {
	case "amqp":
		hostURL := hostServer(t, rabbitMQ)
		worker["amqp"] = podURL(t, hostURL, forwardFromNode(t, hostURL))
		where = []string{"--queue", "amqp", "--amqp", hostURL}
		left = rabbitLeft(t, hostURL, name)
	case "postgres":
		hostURL := hostServer(t, postgreSQL)
		worker["postgres"] = podURL(t, hostURL, forwardFromNode(t, hostURL))
		where = []string{"--queue", "postgres", "--postgres", hostURL}
		left = postgresLeft(t, hostURL, name)
	}
	e := newEnv(t, "runner-"+queue+"-"+mode)
	if queue == "nats" {
		natsURL := e.startNATS()
		worker["nats"] = natsURL
		where = []string{"--nats", natsURL}
	}
	where = append(where, "--name", name)
	logs := e.followLogs("worker")
	e.helmInstall("lameduck-demo", map[string]any{"replicaCount": 1, "worker": worker})

	var ids []string
	start := time.Now()
	for i := range runnerRounds {
		batch := enqueueJobs(t, bin, where, runnerBatch, runnerJobTime)
		ids = append(ids, batch...)
		// Mid-job: the round's restart waits until a job of its batch runs.
		waitUntil(t, 2*time.Minute, "a job of round "+strconv.Itoa(i+1)+" in flight", func() error {
			if logs.started(batch) == 0 {
				return fmt.Errorf("none of %d jobs started", len(batch))
			}
			return nil
		})
		round := time.Now()
		e.restart("lameduck-demo-worker")
		e.waitRolledOut("lameduck-demo-worker", 4*time.Minute)
		t.Logf("round %d: rolled out, old runners gone, in %.1fs", i+1, time.Since(round).Seconds())
	}
	waitUntil(t, 3*time.Minute, "every job done", func() error {
		done := logs.jobsDone()
		for _, id := range ids {
			if done[id] == 0 {
				return fmt.Errorf("job %s not done yet (%d of %d done)", id, len(done), len(ids))
			}
		}
		return nil
	})
	took := time.Since(start)
	done := logs.jobsDone()
	lost, duplicates := 0, 0
	for _, id := range ids {
		switch n := done[id]; {
		case n == 0:
			lost++
		case n > 1:
			duplicates += n - 1
			t.Logf("job %s done %d times (at least once: a duplicate)", id, n)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d jobs lost", lost, len(ids))
	}
	queueLeft := "not counted: the stream's server is the namespace's"
	if left != nil {
		jobs, dead := left()
		queueLeft = fmt.Sprintf("%d left, %d dead-lettered", jobs, dead)
		if jobs != 0 || dead != 0 {
			t.Errorf("the %s queue still holds %d job(s) and dead-lettered %d after every job was done; want none", queue, jobs, dead)
		}
	}
	drains := logs.drains()
	midJob := 0
	var lengths []string
	for _, d := range drains {
		if d.inFlight > 0 {
			midJob++
		}
		if d.took >= 0 {
			lengths = append(lengths, fmt.Sprintf("%s %d in flight %.1fs", d.pod, d.inFlight, d.took.Seconds()))
		}
	}
	// Every old runner drained, and exited 0 (waitRolledOut saw them gone; a
	// drain that cut a job would have logged it and exited 1).
	if len(drains) < 2*runnerRounds {
		t.Errorf("%d drains in the runners' logs; want at least %d (two runners, %d rounds)", len(drains), 2*runnerRounds, runnerRounds)
	}
	if midJob == 0 {
		t.Errorf("no runner held a job at its signal: the restarts were not mid-job")
	}
	if cut := logs.count("job(s) cut at the drain bound"); cut > 0 {
		t.Errorf("%d runner(s) cut a job at the drain bound", cut)
	}
	first, last := logs.span()
	t.Logf("%s/%s: %d jobs of %s, %d restarts: %d done, %d lost, %d duplicates; queue: %s; handed back %d; %d drains, %d mid-job (pods' logs: %s); jobs ran %.1fs from the first start to the last done (pods' logs), %.1fs from the first enqueue (test clock)",
		queue, mode, len(ids), runnerJobTime, runnerRounds, len(ids)-lost, lost, duplicates, queueLeft, logs.handedBack(), len(drains), midJob,
		strings.Join(lengths, ", "), last.Sub(first).Seconds(), took.Seconds())
}

// enqueueJobs runs `lameduck demo-worker enqueue` on the host with where
// (the queue and its address) and returns the ids of the n jobs of d.
func enqueueJobs(t *testing.T, bin string, where []string, n int, d time.Duration) []string {
	t.Helper()
	args := append([]string{"demo-worker", "enqueue", "--n", fmt.Sprint(n), "--d", d.String()}, where...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("enqueue: %v\n%s", err, out)
	}
	// "... (ids job-B-0001 to job-B-0010)"
	_, rest, ok := strings.Cut(string(out), "(ids ")
	first, _, ok2 := strings.Cut(rest, " to ")
	if !ok || !ok2 {
		t.Fatalf("enqueue said %q", out)
	}
	prefix := strings.TrimSuffix(first, "0001")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i+1)
	}
	return ids
}

// hostService is one of the host's servers the runner test consumes from.
type hostService struct {
	name, envVar, def, start string
}

// The host's servers, found as the other modules' integration tests find
// them (the variables and defaults of internal/testsupport).
var (
	rabbitMQ   = hostService{"RabbitMQ", "LDTEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", "rabbitmq-server -detached"}
	postgreSQL = hostService{"PostgreSQL", "LDTEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"}
)

// hostServer returns the URL of s, once its port accepts a connection; it
// fails the test when CI is set and s does not answer, and skips it
// otherwise.
func hostServer(t *testing.T, s hostService) string {
	t.Helper()
	raw := os.Getenv(s.envVar)
	if raw == "" {
		raw = s.def
	}
	u, err := url.Parse(raw)
	if err == nil && u.Port() == "" {
		err = fmt.Errorf("no port")
	}
	if err != nil {
		t.Fatalf("%s=%q: want a URL with a host and a port, such as %s (%v)", s.envVar, raw, s.def, err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		msg := fmt.Sprintf("%s at %s=%s did not answer (%v); set %s or start it: %s", s.name, s.envVar, u.Redacted(), err, s.envVar, s.start)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	c.Close()
	return raw
}

// podURL is hostURL with its host and port replaced by the node IP and
// port, where a forwarder reaches the host's server for the pods.
func podURL(t *testing.T, hostURL string, port int) string {
	t.Helper()
	u, err := url.Parse(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort(cluster.NodeIP, strconv.Itoa(port))
	return u.String()
}

// forwardFromNode forwards TCP from a free port of the node IP, which the
// pods reach, to the host and port of hostURL: the host's servers listen
// on loopback only, and the test changes nothing in them. It runs in the
// test process, and is closed (its connections, then its goroutines
// joined) when the test ends, after the namespace's pods are gone when it
// is started before newEnv. It returns the port.
func forwardFromNode(t *testing.T, hostURL string) int {
	t.Helper()
	u, err := url.Parse(hostURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", net.JoinHostPort(cluster.NodeIP, "0"))
	if err != nil {
		t.Fatalf("listening on the node IP %s for the pods: %v", cluster.NodeIP, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{} // guarded by mu
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil { // closed
			return false
		}
		conns[c] = true
		return true
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			if !track(c) || !track(s) {
				c.Close()
				s.Close()
				return
			}
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						if _, werr := dst.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				dst.Close()
				src.Close()
			}
			wg.Go(func() { pipe(s, c) })
			wg.Go(func() { pipe(c, s) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// rabbitLeft returns a count of the jobs in the RabbitMQ queue of name
// (ready; nothing is held unacknowledged once every job is done) and in
// its dead-letter queue, and deletes both queues when the test ends.
func rabbitLeft(t *testing.T, hostURL, name string) func() (int, int) {
	t.Helper()
	work, dead := "lameduck."+name+".jobs", "lameduck."+name+".dead"
	withChannel := func(f func(ch *amqp.Channel) error) error {
		conn, err := amqp.DialConfig(hostURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		return f(ch)
	}
	t.Cleanup(func() {
		_ = withChannel(func(ch *amqp.Channel) error {
			_, _ = ch.QueueDelete(work, false, false, false)
			_, err := ch.QueueDelete(dead, false, false, false)
			return err
		})
	})
	return func() (jobs, deadLettered int) {
		err := withChannel(func(ch *amqp.Channel) error {
			for _, q := range []struct {
				name string
				n    *int
			}{{work, &jobs}, {dead, &deadLettered}} {
				info, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
				if err != nil {
					return fmt.Errorf("queue %s: %w", q.name, err)
				}
				*q.n = info.Messages
			}
			return nil
		})
		if err != nil {
			t.Fatalf("counting the RabbitMQ queue: %v", err)
		}
		return jobs, deadLettered
	}
}

// postgresLeft returns a count of the rows left in the jobs table of name
// (ready, delayed or running; an acknowledged job's row is deleted) and of
// its dead rows, and drops the table, and the fleet's epoch rows, when the
// test ends.
func postgresLeft(t *testing.T, hostURL, name string) func() (int, int) {
	t.Helper()
	table := pgx.Identifier{"lameduck_" + name + "_jobs"}.Sanitize()
	with := func(f func(ctx context.Context, c *pgx.Conn) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, hostURL)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		return f(ctx, c)
	}
	t.Cleanup(func() {
		_ = with(func(ctx context.Context, c *pgx.Conn) error {
			_, _ = c.Exec(ctx, "DROP TABLE IF EXISTS "+table)
			_, err := c.Exec(ctx, "DELETE FROM lameduck_epochs WHERE fleet = $1", name)
			return err
		})
	})
	return func() (jobs, dead int) {
		err := with(func(ctx context.Context, c *pgx.Conn) error {
			return c.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state <> 'dead'), count(*) FILTER (WHERE state = 'dead') FROM "+table).Scan(&jobs, &dead)
		})
		if err != nil {
			t.Fatalf("counting the PostgreSQL table: %v", err)
		}
		return jobs, dead
	}
}

// podLogs follows the logs of one container in every pod of the namespace
// from its start, so the lines of a pod deleted since are kept.
type podLogs struct {
	mu    sync.Mutex
	lines []map[string]any
	seen  map[string]bool
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func (e *env) followLogs(container string) *podLogs {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pl := &podLogs{seen: map[string]bool{}, stop: cancel}
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	pl.wg.Add(1)
	go func() {
		defer pl.wg.Done()
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name != container || (cs.State.Running == nil && cs.State.Terminated == nil) {
					continue
				}
				key := fmt.Sprintf("%s/%d", p.Name, cs.RestartCount)
				pl.mu.Lock()
				fresh := !pl.seen[key]
				pl.seen[key] = true
				pl.mu.Unlock()
				if fresh {
					pl.wg.Add(1)
					go pl.follow(ctx, e, p.Name, container)
				}
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); pl.wg.Wait() })
	return pl
}

func (pl *podLogs) follow(ctx context.Context, e *env, pod, container string) {
	defer pl.wg.Done()
	rc, err := e.cs.CoreV1().Pods(e.ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	if err != nil {
		return
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			rec["pod"] = pod
			pl.mu.Lock()
			pl.lines = append(pl.lines, rec)
			pl.mu.Unlock()
		}
	}
}

// jobsDone counts "job done" lines per job id.
func (pl *podLogs) jobsDone() map[string]int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	done := map[string]int{}
	for _, r := range pl.lines {
		if r["msg"] == "demo-worker: job done" {
			if id, _ := r["job"].(string); id != "" {
				done[id]++
			}
		}
	}
	return done
}

// started counts the jobs of ids that have started at least once.
func (pl *podLogs) started(ids []string) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := 0
	seen := map[string]bool{}
	for _, r := range pl.lines {
		if id, _ := r["job"].(string); r["msg"] == "demo-worker: job started" && !seen[id] && slices.Contains(ids, id) {
			seen[id] = true
			n++
		}
	}
	return n
}

// handedBack counts the jobs runners gave back to the broker.
func (pl *podLogs) handedBack() int {
	return pl.count("lameduck: worker: job handed back")
}

// count counts the lines whose msg contains s.
func (pl *podLogs) count(s string) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := 0
	for _, r := range pl.lines {
		if m, _ := r["msg"].(string); strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// drain is one runner's drain, as its own log tells it.
type drain struct {
	pod      string
	inFlight int           // jobs in flight at the signal (the draining line's in_flight)
	took     time.Duration // from the draining line to the stopped line; -1 without one
}

// drains reads each pod's drain from its log, in the order of the signals:
// lameduck's lines, or the naive server's ("naive: draining", "naive:
// stopped"). nil podLogs have none.
func (pl *podLogs) drains() []drain {
	if pl == nil {
		return nil
	}
	var out []drain
	began := map[string]time.Time{}
	at := map[string]int{}
	pl.timed(func(pod, m string, ts time.Time, r map[string]any) {
		switch {
		case strings.HasPrefix(m, "lameduck: draining") || m == "naive: draining":
			if _, ok := at[pod]; ok {
				return // the first line: the preStop hook's, when one came before SIGTERM
			}
			n, _ := r["in_flight"].(float64)
			began[pod] = ts
			at[pod] = len(out)
			out = append(out, drain{pod: pod, inFlight: int(n), took: -1})
		case m == "lameduck: stopped" || m == "naive: stopped":
			if i, ok := at[pod]; ok {
				out[i].took = ts.Sub(began[pod])
			}
		}
	})
	return out
}

// timed calls f with each line that has a time, in the order the lines
// came, with its pod, msg and time parsed; the lines are locked meanwhile.
func (pl *podLogs) timed(f func(pod, msg string, ts time.Time, r map[string]any)) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, r := range pl.lines {
		ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["time"]))
		if err != nil {
			continue
		}
		pod, _ := r["pod"].(string)
		m, _ := r["msg"].(string)
		f(pod, m, ts, r)
	}
}

// span is the time of the first "job started" and of the last "job done"
// line, each by its pod's clock (the pods share the node's).
func (pl *podLogs) span() (first, last time.Time) {
	pl.timed(func(_, m string, ts time.Time, _ map[string]any) {
		switch m {
		case "demo-worker: job started":
			if first.IsZero() || ts.Before(first) {
				first = ts
			}
		case "demo-worker: job done":
			if ts.After(last) {
				last = ts
			}
		}
	})
	return first, last
}

// startNATS runs a NATS server with JetStream in the namespace
// (testdata/nats.yaml: nats-server built from its module, the suite's
// natsImage) and returns its URL at the Service's ClusterIP.
func (e *env) startNATS() string {
	e.t.Helper()
	e.applyTestdata("nats.yaml", "nats", 2*time.Minute)
	svc, err := e.cs.CoreV1().Services(e.ns).Get(e.t.Context(), "nats", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprintf("nats://%s:4222", svc.Spec.ClusterIP)
}

package ldamqp_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ldamqp "github.com/lameduck/lameduck/contrib/amqp"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	"github.com/lameduck/lameduck/worker/sourcetest"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The conformance suite on the shared RabbitMQ: short by default (under a
// minute on two cores); LDTEST_SUITE_FULL=1 runs it at full size, and
// again over a link of 100ms each way; LDTEST_SUITE_LATENCY (a Go
// duration) runs it once over a link of that latency;
// LDTEST_SUITE_SCENARIOS (names, comma-separated) runs only those. The
// shared broker must not be restarted, so the restart scenario runs on a
// RabbitMQ node of the test's own (about 15s to start, 10s per restart),
// with LDTEST_SUITE_FULL=1 or LDTEST_SUITE_RESTART=1, and is skipped
// otherwise.
func TestConformance(t *testing.T) {
	u := live(t)
	full := os.Getenv("LDTEST_SUITE_FULL") == "1"
	o := sourcetest.Options{Short: !full, Loops: 4}
	if full {
		o.Jobs = 5000 // at least 5,000 jobs and 20 drains at full size
	}
	if v := os.Getenv("LDTEST_SUITE_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LDTEST_SUITE_LATENCY=%q: %v; use a Go duration such as 100ms", v, err)
		}
		o.Latency = d
	}
	if v := os.Getenv("LDTEST_SUITE_SCENARIOS"); v != "" {
		o.Scenarios = strings.Split(v, ",")
	}
	h := newSuiteQueue(t, u, o.Loops, nil)
	sourcetest.Run(t, h.harness(), o)
	if full && o.Latency == 0 {
		lo := o
		lo.Latency = 100 * time.Millisecond
		sourcetest.Run(t, h.harness(), lo)
	}
	if full || os.Getenv("LDTEST_SUITE_RESTART") == "1" {
		t.Run("own-node", func(t *testing.T) {
			node := startNode(t)
			h := newSuiteQueue(t, node.url, o.Loops, node)
			ro := o
			ro.Scenarios = []string{"restart"}
			sourcetest.Run(t, h.harness(), ro)
		})
	}
}

// suiteQueue is the work queue the suite runs on, reset by each scenario.
type suiteQueue struct {
	t       *testing.T
	url     *url.URL
	loops   int
	ctl     string                          // rabbitmqctl's path; "" when it is not installed
	node    string                          // the node rabbitmqctl asks; "" for its default
	restart func(ctx context.Context) error // nil: the broker is shared

	mu     sync.Mutex
	admin  *amqp.Connection // guarded by mu: the harness's own, straight to the broker; redialled after a restart
	q      ldamqp.Queue     // guarded by mu: as Reset last declared it
	dead   []string         // guarded by mu: the dead-lettered jobs' IDs, as last read
	deadOf int              // guarded by mu: the dead-letter queue's length when dead was read
}

func newSuiteQueue(t *testing.T, u *url.URL, loops int, node *privateNode) *suiteQueue {
	name := fmt.Sprintf("lameduck-suite-%d", time.Now().UnixNano())
	h := &suiteQueue{t: t, url: u, loops: loops, q: ldamqp.Queue{Name: name, DeadLetterQueue: name + ".dlq"}}
	h.ctl, _ = exec.LookPath("rabbitmqctl")
	if node != nil {
		h.node, h.restart = node.name, node.restart
	}
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.admin != nil {
			h.admin.Close()
		}
	})
	t.Cleanup(func() {
		_ = h.withChannel(func(ch *amqp.Channel) error {
			for _, n := range h.queues() {
				if _, err := ch.QueueDelete(n, false, false, false); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return h
}

func (h *suiteQueue) harness() sourcetest.Harness {
	return sourcetest.Harness{
		Name:      "amqp",
		Addr:      h.url.Host,
		Reset:     h.reset,
		Publish:   h.publish,
		NewSource: h.newSource,
		Count:     h.count,
		Restart:   h.restart,
	}
}

// The suite's runners hand back with FailureBackoff 10ms, doubling up to
// the default 5m, and EpochMismatchDelay 200ms: these are the wait queues
// they can use.
func suiteDelays() []time.Duration {
	ds := []time.Duration{200 * time.Millisecond}
	for d := 10 * time.Millisecond; d < 5*time.Minute; d *= 2 {
		ds = append(ds, d)
	}
	return append(ds, 5*time.Minute)
}

// queues names the work queue, its dead-letter queue and its wait queues.
func (h *suiteQueue) queues() []string {
	h.mu.Lock()
	q := h.q
	h.mu.Unlock()
	names := []string{q.Name, q.DeadLetterQueue}
	for _, d := range suiteDelays() {
		n, _ := q.WaitQueue(d)
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// withChannel runs fn on a channel of its own, closed after, on the
// harness's connection. A restart closes that connection: it is dialled
// again by the next Reset, before the suite counts goroutines; until then
// each call dials one of its own and closes it, so that no goroutine of
// the harness outlives the scenario's runners.
func (h *suiteQueue) withChannel(fn func(ch *amqp.Channel) error) error {
	return h.on(false, fn)
}

func (h *suiteQueue) on(reset bool, fn func(ch *amqp.Channel) error) error {
	h.mu.Lock()
	admin := h.admin
	h.mu.Unlock()
	if admin == nil || admin.IsClosed() {
		conn, err := amqp.DialConfig(h.url.String(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return err
		}
		admin = conn
		if reset {
			h.mu.Lock()
			h.admin = conn
			h.mu.Unlock()
		} else {
			defer conn.Close()
		}
	}
	ch, err := admin.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return fn(ch)
}

// reset deletes the queues and declares them again, for maxDeliver
// deliveries of a job (0: unlimited), the wait queues included.
func (h *suiteQueue) reset(_ context.Context, maxDeliver int) error {
	h.mu.Lock()
	q := h.q
	q.MaxDeliveries, q.DeliveryLimit = maxDeliver, 0
	if maxDeliver == 0 { // no limit: none of lameduck's, none of RabbitMQ's
		q.MaxDeliveries, q.DeliveryLimit = 1<<30, 1<<30
	}
	h.q, h.dead, h.deadOf = q, nil, 0
	h.mu.Unlock()
	return h.on(true, func(ch *amqp.Channel) error {
		for _, n := range h.queues() {
			if _, err := ch.QueueDelete(n, false, false, false); err != nil {
				return err
			}
		}
		if err := ldamqp.DeclareQueue(ch, q); err != nil {
			return err
		}
		for _, d := range suiteDelays() {
			if _, err := ldamqp.DeclareWaitQueue(ch, q, d); err != nil {
				return err
			}
		}
		return nil
	})
}

// publish publishes one message per id and waits for every confirm.
func (h *suiteQueue) publish(ctx context.Context, ids []string) error {
	h.mu.Lock()
	q := h.q
	h.mu.Unlock()
	return h.withChannel(func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		dcs := make([]*amqp.DeferredConfirmation, 0, len(ids))
		for _, id := range ids {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q.Name, true, false,
				amqp.Publishing{MessageId: id, Body: []byte(id), DeliveryMode: amqp.Persistent})
			if err != nil {
				return err
			}
			dcs = append(dcs, dc)
		}
		for i, dc := range dcs {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("the broker refused job %s", ids[i])
			}
		}
		return nil
	})
}

// newSource makes a runner's Source through addr, the suite's relay: its
// own connection, a prefetch of one per loop, a redial through the relay.
func (h *suiteQueue) newSource(_ context.Context, addr string) (worker.Source, func(), error) {
	h.mu.Lock()
	q := h.q
	h.mu.Unlock()
	via := *h.url
	via.Host = addr
	dial := func() (*amqp.Connection, error) {
		return amqp.DialConfig(via.String(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	}
	conn, err := dial()
	if err != nil {
		return nil, nil, err
	}
	src, err := ldamqp.NewSource(conn, ldamqp.SourceConfig{
		Queue: q, Prefetch: h.loops, Logger: quiet(),
		Redial: func(context.Context) (*amqp.Connection, error) { return dial() },
	})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return src, func() {
		src.Close()
		conn.Close()
	}, nil
}

// count reads the work queue's and the wait queues' ready messages, and
// the dead-letter queue's. AMQP tells a client only the ready messages of
// a queue; when there are none, the work queue's unacknowledged ones
// (held by consumers) come from rabbitmqctl, when installed.
func (h *suiteQueue) count(ctx context.Context) (sourcetest.Counts, error) {
	var c sourcetest.Counts
	h.mu.Lock()
	q := h.q
	h.mu.Unlock()
	err := h.withChannel(func(ch *amqp.Channel) error {
		for _, n := range h.queues() {
			st, err := ch.QueueDeclarePassive(n, true, false, false, false, nil)
			if err != nil {
				return fmt.Errorf("queue %q: %w", n, err)
			}
			if n == q.DeadLetterQueue {
				c.DeadLettered = st.Messages
			} else {
				c.Pending += st.Messages
			}
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	if c.Pending == 0 && h.ctl != "" {
		n, err := h.unacked(ctx, q.Name)
		if err != nil {
			return c, err
		}
		c.Pending += n
	}
	if c.DeadLettered > 0 {
		ids, err := h.deadIDs(c.DeadLettered)
		if err != nil {
			return c, err
		}
		c.DeadIDs = ids
	}
	return c, nil
}

// unacked asks rabbitmqctl for queue's unacknowledged messages.
func (h *suiteQueue) unacked(ctx context.Context, queue string) (int, error) {
	args := []string{"list_queues", "-q", "--no-table-headers", "name", "messages_unacknowledged"}
	if h.node != "" {
		args = append([]string{"-n", h.node}, args...)
	}
	out, err := exec.CommandContext(ctx, h.ctl, args...).Output()
	if err != nil {
		return 0, fmt.Errorf("rabbitmqctl list_queues: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == queue {
			return strconv.Atoi(f[1])
		}
	}
	return 0, errors.New("rabbitmqctl list_queues does not list " + queue)
}

// deadIDs reads the IDs of the n dead-lettered jobs: each is taken with
// basic.get and returned when the channel closes (the dead-letter queue
// has no consumer and no limit). They are read again only when n changed.
func (h *suiteQueue) deadIDs(n int) ([]string, error) {
	h.mu.Lock()
	q, ids, of := h.q, h.dead, h.deadOf
	h.mu.Unlock()
	if of == n {
		return ids, nil
	}
	ids = nil
	err := h.withChannel(func(ch *amqp.Channel) error {
		for range n {
			d, ok, err := ch.Get(q.DeadLetterQueue, false)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			ids = append(ids, d.MessageId)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, nil // changed meanwhile: DeadLettered is checked alone this time
	}
	h.mu.Lock()
	h.dead, h.deadOf = ids, n
	h.mu.Unlock()
	return ids, nil
}

// privateNode is a RabbitMQ node of the test's own, on free ports of
// 127.0.0.1, its data in a directory of its own: the one the restart
// scenario may restart. It is stopped, and its directory removed, when
// the test ends.
type privateNode struct {
	name string
	url  *url.URL
	ctl  string
}

// startNode starts a private node, or fails t saying what is missing.
func startNode(t *testing.T) *privateNode {
	t.Helper()
	server, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		t.Fatalf("the restart scenario needs a RabbitMQ node of its own: %v; install rabbitmq-server, or run without LDTEST_SUITE_FULL and LDTEST_SUITE_RESTART", err)
	}
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "lameduck-amqp-node-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // rabbitmq-server runs as its own user
		t.Fatal(err)
	}
	port, dist := testsupport.FreePort(t), testsupport.FreePort(t)
	n := &privateNode{name: fmt.Sprintf("lameduck-test-%d@localhost", os.Getpid()), ctl: ctl}
	n.url = &url.URL{Scheme: "amqp", User: url.UserPassword("guest", "guest"), Host: fmt.Sprintf("127.0.0.1:%d", port), Path: "/"}
	conf := dir + "/node.conf"
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listeners.tcp.default = 127.0.0.1:%d\n", port), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := dir + "/node.pid"
	cmd := exec.Command(server, "-detached")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RABBITMQ_NODENAME="+n.name, "RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE="+dir+"/mnesia", "RABBITMQ_LOG_BASE="+dir+"/log", "RABBITMQ_ENABLED_PLUGINS_FILE="+dir+"/plugins",
		"RABBITMQ_CONFIG_FILE="+conf, "RABBITMQ_PID_FILE="+pid)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("rabbitmq-server -detached: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(ctl, "-n", n.name, "stop", pid).CombinedOutput(); err != nil {
			t.Logf("stopping the node %s: %v\n%s", n.name, err, out)
		}
		os.RemoveAll(dir)
	})
	if out, err := exec.Command(ctl, "-n", n.name, "wait", pid, "--timeout", "120").CombinedOutput(); err != nil {
		t.Fatalf("the node %s did not start within 2 minutes: %v\n%s", n.name, err, out)
	}
	return n
}

// restart stops the node's RabbitMQ application and starts it again: its
// connections close, its queues and their messages stay.
func (n *privateNode) restart(ctx context.Context) error {
	for _, step := range []string{"stop_app", "start_app", "await_startup"} {
		if out, err := exec.CommandContext(ctx, n.ctl, "-n", n.name, step).CombinedOutput(); err != nil {
			return fmt.Errorf("rabbitmqctl %s: %v\n%s", step, err, out)
		}
	}
	return nil
}

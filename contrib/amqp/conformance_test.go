//go:build sourcetest

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
	"github.com/lameduck/lameduck/worker"
	"github.com/lameduck/lameduck/worker/sourcetest"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The conformance suite on the shared RabbitMQ: short by default (under a
// minute on two cores); LAMEDUCK_SUITE_FULL=1 runs it at full size, and
// again over a link of 100ms each way; LAMEDUCK_SUITE_LATENCY (a Go
// duration) runs it once over a link of that latency. The restart
// scenario is skipped: the broker is shared, and the suite must not
// restart it.
func TestConformance(t *testing.T) {
	u := live(t)
	full := os.Getenv("LAMEDUCK_SUITE_FULL") == "1"
	o := sourcetest.Options{Short: !full, Loops: 4}
	if v := os.Getenv("LAMEDUCK_SUITE_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LAMEDUCK_SUITE_LATENCY=%q: %v; use a Go duration such as 100ms", v, err)
		}
		o.Latency = d
	}
	h := newSuiteQueue(t, u, o.Loops)
	sourcetest.Run(t, h.harness(), o)
	if full && o.Latency == 0 {
		o.Latency = 100 * time.Millisecond
		sourcetest.Run(t, h.harness(), o)
	}
}

// suiteQueue is the work queue the suite runs on, reset by each scenario.
type suiteQueue struct {
	t     *testing.T
	url   *url.URL
	admin *amqp.Connection // the harness's own, straight to the broker
	loops int
	ctl   string // rabbitmqctl's path; "" when it is not installed

	mu     sync.Mutex
	q      ldamqp.Queue // guarded by mu: as Reset last declared it
	dead   []string     // guarded by mu: the dead-lettered jobs' IDs, as last read
	deadOf int          // guarded by mu: the dead-letter queue's length when dead was read
}

func newSuiteQueue(t *testing.T, u *url.URL, loops int) *suiteQueue {
	name := fmt.Sprintf("lameduck-suite-%d", time.Now().UnixNano())
	h := &suiteQueue{t: t, url: u, admin: dialURL(t, u.String()), loops: loops,
		q: ldamqp.Queue{Name: name, DeadLetterQueue: name + ".dlq"}}
	h.ctl, _ = exec.LookPath("rabbitmqctl")
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

// withChannel runs fn on a channel of its own, closed after.
func (h *suiteQueue) withChannel(fn func(ch *amqp.Channel) error) error {
	ch, err := h.admin.Channel()
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
	return h.withChannel(func(ch *amqp.Channel) error {
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
	out, err := exec.CommandContext(ctx, h.ctl, "list_queues", "-q", "--no-table-headers", "name", "messages_unacknowledged").Output()
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

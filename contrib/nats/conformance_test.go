package ldnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/worker"
	"github.com/lameduck/lameduck/worker/sourcetest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The conformance suite's stream and consumer, and the header that carries
// a job's id (kept by a last-delivery copy, unlike Nats-Msg-Id).
const (
	suiteStream   = "SUITE"
	suiteSubject  = "suite.jobs"
	suiteConsumer = "suite"
	suiteIDHeader = "Suite-Job-Id"
	// suiteDLQ stores the consumer's max-deliveries advisories: the
	// dead-letter queue of NATS, each naming a job's stream sequence.
	suiteDLQ = "SUITE_DLQ"
	// suiteAckWait is the consumer's AckWait: how long a job lost in
	// transit (a cut connection, a restart) waits to be redelivered.
	suiteAckWait = 3 * time.Second
)

// natsHarness drives a JetStream server (or cluster) for the suite.
type natsHarness struct {
	t        *testing.T
	servers  []*embedded // one, or a cluster of three
	replicas int
	urls     string // every server's URL
}

// newNATSHarness starts n embedded JetStream servers (1, or 3 clustered),
// and connects to the first.
func newNATSHarness(t *testing.T, n int) *natsHarness {
	t.Helper()
	h := &natsHarness{t: t, replicas: n}
	if n == 1 {
		h.servers = []*embedded{startEmbedded(t, true)}
	} else {
		h.servers = startCluster(t, n)
	}
	urls := ""
	for i, e := range h.servers {
		if i > 0 {
			urls += ","
		}
		urls += e.url()
	}
	h.urls = urls
	return h
}

// conn opens a connection of the harness's own for one call: one that
// lived across a scenario would reconnect after a restart, and its new
// goroutines would read as a Source's leak.
func (h *natsHarness) conn(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	return dialJetStream(h.urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
}

// dialJetStream connects to url with opts and opens the connection's
// JetStream context; when that fails it closes the connection.
func dialJetStream(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// startCluster starts n JetStream servers routed to one another, each on
// fixed ports (so a restart listens where it did), and waits for a
// meta-leader.
func startCluster(t *testing.T, n int) []*embedded {
	t.Helper()
	ports := freePorts(t, 2*n)
	routes := ""
	for i := range n {
		if i > 0 {
			routes += ","
		}
		routes += fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])
	}
	var es []*embedded
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("s%d", i), Host: "127.0.0.1", Port: ports[i], NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "suite", Host: "127.0.0.1", Port: ports[n+i]},
			Routes:  server.RoutesFromStr(routes),
		}
		es = append(es, &embedded{t: t, opts: opts})
	}
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Go(func() { e.startAsync() })
	}
	wg.Wait()
	for _, e := range es {
		t.Cleanup(e.stop)
		if e.s == nil {
			t.Fatal("a cluster server did not start")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if es[0].s.JetStreamIsLeader() || es[1].s.JetStreamIsLeader() || es[2].s.JetStreamIsLeader() {
			if es[0].s.JetStreamIsCurrent() {
				return es
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the JetStream cluster elected no meta-leader within 30s")
	return nil
}

// startAsync starts the server; a cluster's servers wait for one another.
func (e *embedded) startAsync() {
	s, err := server.NewServer(e.opts)
	if err != nil {
		return
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return
	}
	e.s = s
}

// freePorts returns n loopback ports free now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

func (h *natsHarness) harness(name string) sourcetest.Harness {
	return sourcetest.Harness{
		Name:             name,
		Addr:             h.servers[0].addr(),
		Reset:            h.reset,
		Publish:          h.publish,
		NewSource:        h.newSource,
		Count:            h.count,
		Restart:          h.restart,
		IgnoreGoroutines: []string{"nats-server/v2/server", "nats-server/v2/internal", "klauspost/compress"},
	}
}

// errNoPeers is JetStream's "no suitable peers for placement": the
// meta-leader holds a peer offline. A cluster's server is marked offline
// when its heartbeat is late, which a loaded 2-core machine delays; the
// next heartbeat marks it online again.
const errNoPeers jetstream.ErrorCode = 10005

// reset deletes and recreates the stream (work-queue retention, R1 or R3)
// and its consumer with MaxDeliver maxDeliver (0: unlimited). While the
// meta-leader holds a peer offline (errNoPeers) it tries again, every
// 250ms, until ctx ends: that is the harness waiting for its own cluster,
// not a Source's fault, and nothing has been published yet.
func (h *natsHarness) reset(ctx context.Context, maxDeliver int) error {
	for {
		err := h.resetOnce(ctx, maxDeliver)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errNoPeers {
			return err
		}
		h.t.Logf("reset: %v; trying again in 250ms", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the cluster held a peer offline until the reset's deadline)", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// resetOnce is one try of reset.
func (h *natsHarness) resetOnce(ctx context.Context, maxDeliver int) error {
	nc, js, err := h.conn(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, name := range []string{suiteStream, suiteDLQ} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: suiteDLQ, Replicas: h.replicas,
		Subjects: []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + suiteStream + "." + suiteConsumer}}); err != nil {
		return err
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: suiteStream, Subjects: []string{suiteSubject},
		Retention: jetstream.WorkQueuePolicy, Replicas: h.replicas})
	if err != nil {
		return err
	}
	if maxDeliver == 0 {
		maxDeliver = -1
	}
	_, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: suiteConsumer, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: suiteAckWait, MaxDeliver: maxDeliver, MaxAckPending: -1, Replicas: h.replicas})
	if err != nil {
		return err
	}
	return waitForLeader(ctx, st)
}

// waitForLeader waits until the stream has a leader that answers, every
// 100ms until ctx ends. A replicated stream just created elects one first:
// a publish before that gets "no response from stream" (seen once on a
// 3-server cluster in a cold CI run, as the first scenario's publish).
func waitForLeader(ctx context.Context, st jetstream.Stream) error {
	for {
		info, err := st.Info(ctx)
		if err == nil && (info.Cluster == nil || info.Cluster.Leader != "") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the stream elected no leader before the reset's deadline: %v (last answer: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// publish publishes one message per id, each with its id in a header and
// as its Nats-Msg-Id, and waits for every PubAck.
func (h *natsHarness) publish(ctx context.Context, ids []string) error {
	nc, js, err := h.conn(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	for len(ids) > 0 { // in chunks: nats.go stalls past 4,000 unacknowledged async publishes
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		var futs []jetstream.PubAckFuture
		for _, id := range chunk {
			m := nats.NewMsg(suiteSubject)
			m.Header.Set(suiteIDHeader, id)
			m.Data = []byte(id)
			f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(id))
			if err != nil {
				return err
			}
			futs = append(futs, f)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// newSource connects to addr as a runner would and opens a Source on the
// suite's consumer.
func (h *natsHarness) newSource(ctx context.Context, addr string) (worker.Source, func(), error) {
	nc, js, err := dialJetStream("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, nil, err
	}
	cons, err := js.Consumer(ctx, suiteStream, suiteConsumer)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{
		ID:     func(m jetstream.Msg) string { return m.Headers().Get(suiteIDHeader) },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return src, nc.Close, nil
}

// count reads the consumer and the dead-letter stream. The consumer counts
// the jobs it has not delivered yet (NumPending) and the ones delivered
// and not yet acknowledged, a NAKed one waiting for its redelivery
// included (NumAckPending). A job that exhausted MaxDeliver is named by a
// max-deliveries advisory, which SUITE_DLQ stores; its id is read from the
// jobs' stream, where it stays.
func (h *natsHarness) count(ctx context.Context) (sourcetest.Counts, error) {
	nc, js, err := h.conn(ctx)
	if err != nil {
		return sourcetest.Counts{}, err
	}
	defer nc.Close()
	st, err := js.Stream(ctx, suiteStream)
	if err != nil {
		return sourcetest.Counts{}, err
	}
	cons, err := st.Consumer(ctx, suiteConsumer)
	if err != nil {
		return sourcetest.Counts{}, err
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return sourcetest.Counts{}, err
	}
	c := sourcetest.Counts{Pending: int(ci.NumPending) + ci.NumAckPending}
	dlq, err := js.Stream(ctx, suiteDLQ)
	if err != nil {
		return sourcetest.Counts{}, err
	}
	di, err := dlq.Info(ctx)
	if err != nil {
		return sourcetest.Counts{}, err
	}
	seen := map[uint64]bool{}
	for seq := di.State.FirstSeq; di.State.Msgs > 0 && seq <= di.State.LastSeq; seq++ {
		m, err := dlq.GetMsg(ctx, seq)
		if err != nil {
			return sourcetest.Counts{}, err
		}
		var a struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		if err := json.Unmarshal(m.Data, &a); err != nil {
			return sourcetest.Counts{}, fmt.Errorf("advisory %d: %w", seq, err)
		}
		if seen[a.StreamSeq] {
			continue
		}
		seen[a.StreamSeq] = true
		id := fmt.Sprintf("stream-sequence-%d", a.StreamSeq)
		if jm, err := st.GetMsg(ctx, a.StreamSeq); err == nil {
			id = jm.Header.Get(suiteIDHeader)
		}
		c.DeadIDs = append(c.DeadIDs, id)
	}
	c.DeadLettered = len(c.DeadIDs)
	return c, nil
}

// restart restarts the server the suite's relay points at, keeping its
// store. On a cluster it first asks the stream's and the consumer's
// leaders to step down, so that every restart moves both leaders during a
// drain, whichever server held them.
func (h *natsHarness) restart(ctx context.Context) error {
	if h.replicas > 1 {
		nc, _, err := h.conn(ctx)
		if err != nil {
			return err
		}
		for _, subj := range []string{"$JS.API.CONSUMER.LEADER.STEPDOWN." + suiteStream + "." + suiteConsumer, "$JS.API.STREAM.LEADER.STEPDOWN." + suiteStream} {
			if _, err := nc.RequestWithContext(ctx, subj, nil); err != nil {
				nc.Close()
				return fmt.Errorf("%s: %w", subj, err)
			}
		}
		nc.Close()
	}
	e := h.servers[0]
	port := e.s.Addr().(*net.TCPAddr).Port
	e.stop()
	e.opts.Port = port
	e.startAsync()
	if e.s == nil {
		return errors.New("the restarted server did not come back")
	}
	// A cluster's restarted server must catch up before it serves.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !e.s.JetStreamIsCurrent() {
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// suiteOptions are the suite's sizes: LDTEST_SUITE_FULL=1 runs the full
// sizes (5,000 jobs, 20 drains); otherwise the short form CI runs.
func suiteOptions() sourcetest.Options {
	if full, _ := strconv.ParseBool(os.Getenv("LDTEST_SUITE_FULL")); full {
		return sourcetest.Options{Jobs: 5000, Drains: 20}
	}
	return sourcetest.Options{Short: true}
}

func TestConformanceSingleServer(t *testing.T) {
	h := newNATSHarness(t, 1)
	sourcetest.Run(t, h.harness("nats"), suiteOptions())
}

// TestConformanceSlowLink runs the suite with 100ms added each way between
// the runners and the server; its short form (CI's) runs the scenarios a
// slow link threatens most: drains on a backlog, the last delivery, a cut
// connection.
func TestConformanceSlowLink(t *testing.T) {
	h := newNATSHarness(t, 1)
	o := suiteOptions()
	o.Latency = 100 * time.Millisecond
	if o.Short {
		o.Scenarios = []string{"backlog-interrupt", "last-delivery-complete", "broken"}
	}
	sourcetest.Run(t, h.harness("nats"), o)
}

func TestConformanceCluster(t *testing.T) {
	h := newNATSHarness(t, 3)
	sourcetest.Run(t, h.harness("nats, 3-server cluster"), suiteOptions())
}

// Package natstest holds what the regression tests under contrib/nats/regress
// share: an embedded JetStream server of the test's own, a connection to it,
// and a record of the max-deliveries advisories that say a job was lost.
// It is test support, imported only by test files.
package natstest

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream starts a NATS server with JetStream in the process, on a port of
// its choosing on 127.0.0.1 (server.RANDOM_PORT), storing in t.TempDir(). It
// fails t when the server cannot be made or does not accept connections
// within 10s; t's cleanup shuts it down and waits until it has.
func JetStream(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS server not ready within 10s")
	}
	return s
}

// Connect connects to the NATS server at url with nats.go's defaults and
// returns the connection and its JetStream context. It fails t when either
// cannot be made; t's cleanup closes the connection (closing it earlier is
// harmless).
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// WorkQueue creates (or updates) the stream cfg and its durable consumer cc on
// js, and returns both. It fails t when either is refused.
func WorkQueue(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig, cc jetstream.ConsumerConfig) (jetstream.Stream, jetstream.Consumer) {
	t.Helper()
	ctx := context.Background()
	st, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	return st, cons
}

// MaxDeliveries records the stream sequences named by the server's
// max-deliveries advisories of one consumer: each is a job that reached
// MaxDeliver, which the server will not deliver again. Safe for concurrent
// use.
type MaxDeliveries struct {
	mu   sync.Mutex
	seqs []uint64
}

// WatchMaxDeliveries subscribes nc to the max-deliveries advisories of the
// consumer durable of stream, and flushes so that the subscription is in
// place when it returns. It fails t when the subscription fails; the
// subscription ends with nc.
func WatchMaxDeliveries(t testing.TB, nc *nats.Conn, stream, durable string) *MaxDeliveries {
	t.Helper()
	m := &MaxDeliveries{}
	if _, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+stream+"."+durable, func(msg *nats.Msg) {
		var a struct {
			StreamSeq uint64 `json:"stream_seq"`
		}
		_ = json.Unmarshal(msg.Data, &a)
		m.mu.Lock()
		m.seqs = append(m.seqs, a.StreamSeq)
		m.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return m
}

// Seqs returns a copy of the stream sequences advised so far, in the order
// the advisories arrived; nil when none has.
func (m *MaxDeliveries) Seqs() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.seqs)
}

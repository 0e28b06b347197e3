// Regression test, kept from a hostile review's reproduction, which failed before the fix it names
// below; it passes now. The original text follows.
//
// Reproduction: a ldnats.Source shared by two workers (supported: worker.Drainer
// says "A Source given to several workers is drained by each"; Source says "safe
// for concurrent use") makes the first worker to stop spend its whole teardown
// hook share in Drain and exit with an error, on an idle queue. Drain counts
// every open pull request of the Source, including the other worker's live
// fetches ("a Fetch still waits: should not happen after the loops"), and
// recomputes the deadline from now on every pass, so while the other worker
// keeps fetching Drain never returns until ctx ends; it then returns "N pull
// request(s) ... still open at the end of the teardown's share", the hook fails,
// and Worker.Run returns an error: the process exits non-zero after the full
// hook share, with an error log claiming requests "went unanswered" although
// the server answered every one.
//
// Copy to: contrib/nats/zz_hostile_shared/shared_test.go in a clone (package
// zzhostileshared_test).
// Run:     cd contrib/nats && go test -count=1 -run TestHostileSharedSourceDrain -v ./zz_hostile_shared/
//
// On the current code it prints (FAIL, 3 of 3 runs; worker B has 3 loops, so
// its fetches overlap and the Source always has one open; with B at 1 loop
// there are gaps between its fetches and A usually gets through):
//
//	shared_test.go:100: worker B (stopped afterwards) returned <nil>
//	shared_test.go:102: worker A stopped after 4.0s with error: lameduck: teardown hook "consume loops": context deadline exceeded
//
// (4.0s is the whole hook share, ⅔ of ShutdownTeardown 6s, on an idle queue.)
//
// Fixed: Drain waits only for requests this worker's loops gave up on (or for
// the Source's abandoned requests), and worker A returns nil within about one
// fetch wait: PASS.
package shared_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/contrib/nats/internal/natstest"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go/jetstream"
)

func TestHostileSharedSourceDrain(t *testing.T) {
	srv := natstest.JetStream(t)
	ctx := context.Background()
	_, js := natstest.Connect(t, srv.ClientURL())
	_, cons := natstest.WorkQueue(t, js, jetstream.StreamConfig{Name: "SH", Subjects: []string{"SH.jobs"}},
		jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy})
	src, err := ldnats.NewSource(js, cons, ldnats.SourceConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	newWorker := func(names ...string) *worker.Worker {
		w, err := worker.New(worker.Config{Lifecycle: lameduck.Config{ProbeAddr: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTeardown: 6 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if err := w.AddLoop(worker.Loop{Name: name, Source: src, FetchWait: time.Second,
				Handle: func(ctx context.Context, j worker.Job) error { return nil }}); err != nil {
				t.Fatal(err)
			}
		}
		return w
	}
	a, b := newWorker("a"), newWorker("b1", "b2", "b3") // B runs 3 jobs at once: its fetches overlap
	stopA, aDone := testsupport.GoRun(ctx, a.Run)
	stopB, bDone := testsupport.GoRun(ctx, b.Run)
	time.Sleep(2 * time.Second) // both consuming an idle queue
	began := time.Now()
	stopA()
	errA := <-aDone
	tookA := time.Since(began)
	stopB()
	errB := <-bDone
	t.Logf("worker B (stopped afterwards) returned %v", errB)
	if errA != nil || tookA > 3*time.Second {
		t.Fatalf("worker A stopped after %.1fs with error: %v", tookA.Seconds(), errA)
	}
	t.Logf("worker A stopped after %.1fs, error %v", tookA.Seconds(), errA)
}

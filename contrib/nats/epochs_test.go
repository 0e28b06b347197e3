package ldnats_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ldnats "github.com/lameduck/lameduck/contrib/nats"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/nats-io/nats.go/jetstream"
)

func newEpochs(t *testing.T, js jetstream.JetStream, cfg ldnats.EpochsConfig) *ldnats.Epochs {
	t.Helper()
	e, err := ldnats.NewEpochs(testsupport.Context(t, time.Minute), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func wantNewest(t *testing.T, e *ldnats.Epochs, mine, want uint64, why string) {
	t.Helper()
	got, err := e.Newest(testsupport.Context(t, time.Minute), mine)
	if err != nil || got != want {
		t.Fatalf("Newest(%d) = %d, %v; want %d: %s", mine, got, err, want, why)
	}
}

// bucket returns the key-value bucket of js by that name.
func bucket(t *testing.T, js jetstream.JetStream, name string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(testsupport.Context(t, time.Minute), name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// wantKeys fails t unless the bucket of js by that name holds n keys.
func wantKeys(t *testing.T, js jetstream.JetStream, name string, n int, why string) {
	t.Helper()
	keys, err := bucket(t, js, name).Keys(testsupport.Context(t, time.Minute))
	if err != nil || len(keys) != n {
		t.Fatalf("keys %q, %v; want %s", keys, err, why)
	}
}

func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(connect(t, startEmbedded(t, true).url()))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// The newest epoch is the newest among the fleet's runners alive now: a
// runner that retires (at exit) or begins to drain stops counting at once,
// and the answer falls back (a rollback); another fleet never counts.
func TestEpochsNewestAmongLiveRunners(t *testing.T) {
	js := jetStream(t)
	var draining atomic.Bool
	old := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
	next := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
	third := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs", Draining: draining.Load})
	other := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "other"})

	wantNewest(t, other, 9, 9, "alone in its fleet")
	wantNewest(t, old, 1, 1, "alone in its fleet")
	wantNewest(t, next, 2, 2, "the newest")
	wantNewest(t, old, 1, 2, "a runner of epoch 2 is alive")
	if err := next.Retire(testsupport.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	wantNewest(t, old, 1, 1, "the epoch-2 runner retired")
	wantNewest(t, next, 2, 2, "a retired runner keeps its answer")
	wantNewest(t, old, 1, 1, "a retired runner puts nothing")
	if err := next.Retire(testsupport.Context(t, time.Minute)); err != nil {
		t.Fatalf("a second Retire: %v", err)
	}

	wantNewest(t, third, 3, 3, "the newest")
	wantNewest(t, old, 1, 3, "a runner of epoch 3 is alive")
	draining.Store(true)
	wantNewest(t, third, 3, 3, "a draining runner keeps its last answer")
	wantNewest(t, old, 1, 1, "the epoch-3 runner is draining")
	wantKeys(t, js, ldnats.DefaultEpochBucket, 2, "the two runners' still counting (old's and other's)")
}

// A runner killed without a drain (its key never deleted) stops counting
// once its key is older than three of its polls, by the server's clock,
// and the runner that notices deletes the key.
func TestEpochsStaleKeyStopsCounting(t *testing.T) {
	js := jetStream(t)
	killed := newEpochs(t, js, ldnats.EpochsConfig{Bucket: "epochs", Fleet: "jobs", Poll: 50 * time.Millisecond})
	alive := newEpochs(t, js, ldnats.EpochsConfig{Bucket: "epochs", Fleet: "jobs"})
	wantNewest(t, killed, 5, 5, "alone")
	time.Sleep(500 * time.Millisecond) // more than 3 × 50ms of the server's time passes
	wantNewest(t, alive, 1, 1, "the epoch-5 key is older than three of its polls")
	wantKeys(t, js, "epochs", 1, "only the live runner's: the stale one deleted")
}

// Every live runner is seen while the others put their keys: the epoch-2
// runner polls without pause, and each of the epoch-1 runner's answers is
// 2. (Read through a watch of the bucket, a poll now and then missed the
// epoch-2 key while it was being put, and answered 1: a false rollback, in
// which the superseded runner took jobs.) The delete markers of retired
// runners are purged, so the fleet's subjects do not grow with rollouts.
func TestEpochsEveryLiveRunnerSeenWhileTheyPut(t *testing.T) {
	js := jetStream(t)
	next := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
	old := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
	wantNewest(t, next, 2, 2, "alone")
	ctx, cancel := context.WithCancel(testsupport.Context(t, time.Minute))
	putting := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if _, err := next.Newest(ctx, 2); err != nil && ctx.Err() == nil {
				putting <- err
				return
			}
		}
		putting <- nil
	}()
	for i := range 300 {
		if n, err := old.Newest(ctx, 1); err != nil || n != 2 {
			cancel()
			t.Fatalf("poll %d: Newest(1) = %d, %v while the epoch-2 runner puts its key; want 2", i, n, err)
		}
	}
	cancel()
	if err := <-putting; err != nil {
		t.Fatalf("the epoch-2 runner's Newest: %v", err)
	}

	// Retired runners leave delete markers; the next poll purges them.
	for range 3 {
		r := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
		wantNewest(t, r, 3, 3, "the newest")
		if err := r.Retire(testsupport.Context(t, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	wantNewest(t, old, 1, 2, "the three epoch-3 runners retired")
	st, err := js.Stream(testsupport.Context(t, time.Minute), "KV_"+ldnats.DefaultEpochBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testsupport.Context(t, time.Minute), jetstream.WithSubjectFilter("$KV."+ldnats.DefaultEpochBucket+".jobs.*"))
	if err != nil || len(info.State.Subjects) != 2 {
		t.Fatalf("subjects %v, %v; want the two live runners' only, the retired ones' markers purged", info.State.Subjects, err)
	}
}

// An entry that is not one is named; bad settings are refused before any
// I/O, naming the setting.
func TestEpochsRefuses(t *testing.T) {
	js := jetStream(t)
	e := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
	if _, err := bucket(t, js, ldnats.DefaultEpochBucket).Put(testsupport.Context(t, time.Minute), "jobs.bad", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Newest(testsupport.Context(t, time.Minute), 1); err == nil || !strings.Contains(err.Error(), "lameduck_epochs/jobs.bad") {
		t.Fatalf("Newest with a bad entry: %v; want an error naming the key", err)
	}
	for _, c := range []struct {
		cfg  ldnats.EpochsConfig
		want string
	}{
		{ldnats.EpochsConfig{}, "Fleet=\"\""},
		{ldnats.EpochsConfig{Fleet: "a.b"}, "Fleet=\"a.b\""},
		{ldnats.EpochsConfig{Fleet: "a*"}, "Fleet=\"a*\""},
		{ldnats.EpochsConfig{Fleet: "jobs", Poll: -time.Second}, "Poll=-1s"},
	} {
		if _, err := ldnats.NewEpochs(testsupport.Context(t, time.Minute), js, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewEpochs(%+v): %v; want an error naming %s", c.cfg, err, c.want)
		}
	}
	if _, err := ldnats.NewEpochs(testsupport.Context(t, time.Minute), nil, ldnats.EpochsConfig{Fleet: "jobs"}); err == nil {
		t.Error("a nil JetStream was accepted")
	}
}

// On a three-server JetStream cluster, with the bucket replicated three
// times and the runners on different servers, every poll of the epoch-1
// runner sees the epoch-2 runner's key: the fleet is read from the bucket
// stream's leader, never by a direct get that a lagging replica may answer.
func TestEpochsOnAClusterReadTheLeader(t *testing.T) {
	es := startCluster(t, 3)
	ctx := testsupport.Context(t, 2*time.Minute)
	var jss []jetstream.JetStream
	for _, e := range es {
		nc := connect(t, e.url())
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		jss = append(jss, js)
	}
	next := newEpochs(t, jss[0], ldnats.EpochsConfig{Fleet: "jobs", Replicas: 3})
	old := newEpochs(t, jss[2], ldnats.EpochsConfig{Fleet: "jobs", Replicas: 3})
	kv, err := jss[1].KeyValue(ctx, ldnats.DefaultEpochBucket)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
		t.Fatalf("bucket status %v, %v; want 3 replicas", st, err)
	}
	for i := range 100 {
		if _, err := next.Newest(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if n, err := old.Newest(ctx, 1); err != nil || n != 2 {
			t.Fatalf("poll %d: Newest(1) = %d, %v right after the epoch-2 runner's put on another server; want 2", i, n, err)
		}
	}
}

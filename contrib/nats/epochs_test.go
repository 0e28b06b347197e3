package ldnats_test

import (
	"context"
	"errors"
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
	kv, err := js.KeyValue(testsupport.Context(t, time.Minute), ldnats.DefaultEpochBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(testsupport.Context(t, time.Minute))
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %q, %v; want the two runners' still counting (old's and other's)", keys, err)
	}
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
	kv, err := js.KeyValue(testsupport.Context(t, time.Minute), "epochs")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(testsupport.Context(t, time.Minute))
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %q, %v; want only the live runner's: the stale one deleted", keys, err)
	}
}

// A watch that ends before its initial values are all in is an error,
// never an answer from part of the fleet, which could miss the newest
// runner (a false rollback: the superseded runners fetch again). nats.go
// ends the watch's subscription, and closes its channel, when the call's
// context ends mid-watch (a slow server, a poll interval spent) or the
// connection closes; here the watch is cut before its first entry.
func TestEpochsWatchCutShortIsAnError(t *testing.T) {
	js := jetStream(t)
	next := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
	wantNewest(t, next, 2, 2, "alone")
	cut := &cutWatchJS{JetStream: js}
	old := newEpochs(t, cut, ldnats.EpochsConfig{Fleet: "jobs"})
	wantNewest(t, old, 1, 2, "the watch not cut: a runner of epoch 2 is alive")

	// The subscription ended with the context still alive (as when the
	// connection closes).
	cut.cut.Store(true)
	n, err := old.Newest(testsupport.Context(t, time.Minute), 1)
	if err == nil || !strings.Contains(err.Error(), "lameduck_epochs/jobs.* ended before its initial values were all in") {
		t.Fatalf("Newest with its watch cut short = %d, %v; want an error naming the watch (an answer may miss the epoch-2 runner)", n, err)
	}

	// The context ended mid-watch.
	ctx, cancel := context.WithCancel(testsupport.Context(t, time.Minute))
	defer cancel()
	cut.cancel.Store(&cancel)
	if n, err := old.Newest(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Newest with its context ended mid-watch = %d, %v; want context.Canceled", n, err)
	}
	cut.cut.Store(false)
	wantNewest(t, old, 1, 2, "the next watch whole again")
}

// cutWatchJS is a JetStream whose key-value buckets' watches, while cut
// is set, end at once: the real watch is stopped and the channel closed
// before any entry, as nats.go closes it when the subscription ends; cancel,
// when set, is called first (the context ended mid-watch).
type cutWatchJS struct {
	jetstream.JetStream
	cut    atomic.Bool
	cancel atomic.Pointer[context.CancelFunc]
}

func (c *cutWatchJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := c.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &cutWatchKV{KeyValue: kv, js: c}, nil
}

type cutWatchKV struct {
	jetstream.KeyValue
	js *cutWatchJS
}

func (kv *cutWatchKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := kv.KeyValue.Watch(ctx, keys, opts...)
	if err != nil || !kv.js.cut.Load() {
		return w, err
	}
	if cancel := kv.js.cancel.Load(); cancel != nil {
		(*cancel)()
	}
	_ = w.Stop()
	closed := make(chan jetstream.KeyValueEntry)
	close(closed)
	return cutWatcher(closed), nil
}

type cutWatcher chan jetstream.KeyValueEntry

func (w cutWatcher) Updates() <-chan jetstream.KeyValueEntry { return w }
func (w cutWatcher) Stop() error                             { return nil }

// An entry that is not one is named; bad settings are refused before any
// I/O, naming the setting.
func TestEpochsRefuses(t *testing.T) {
	js := jetStream(t)
	e := newEpochs(t, js, ldnats.EpochsConfig{Fleet: "jobs"})
	kv, err := js.KeyValue(testsupport.Context(t, time.Minute), ldnats.DefaultEpochBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testsupport.Context(t, time.Minute), "jobs.bad", []byte("2")); err != nil {
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

package ldnats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultEpochBucket is the key-value bucket of [Epochs] when
// EpochsConfig.Bucket is empty.
const DefaultEpochBucket = "lameduck_epochs"

// staleFactor is how many of its polls a runner may miss before its entry
// stops counting.
const staleFactor = 3

// EpochsConfig configures [Epochs].
type EpochsConfig struct {
	// Bucket is the JetStream key-value bucket, created (file storage) when
	// it does not exist. Empty means DefaultEpochBucket ("lameduck_epochs").
	Bucket string
	// Fleet names the runners that supersede one another: those that
	// consume the same jobs, such as the consumer's or the queue's name.
	// Each runner's key is <Fleet>.<random id>. Required; letters, digits,
	// '_' and '-' only.
	Fleet string
	// Poll, a time.Duration, is how often the runner asks Newest: pass the
	// worker's EpochPoll. It is published with the epoch, and a runner's
	// entry stops counting once it is older than three of its polls. Zero
	// means worker.DefaultEpochPoll (10s); negative is an error.
	Poll time.Duration
	// Draining reports whether the runner has begun to drain, from which on
	// Newest deletes this runner's key instead of putting it (it takes no
	// new job, so it must supersede no one). Pass the Lifecycle's
	// Events().ShutdownInitiated.Fired. Nil means never.
	Draining func() bool
}

// Epochs is a [worker.EpochSource] on a JetStream key-value bucket that
// counts only the runners alive now (docs/runners.md, "Rollout epochs").
// Each runner owns one key, <Fleet>.<random id>, holding its epoch and its
// poll interval as JSON ({"epoch":2,"poll":"10s"}), and puts it again at
// every call of Newest. An entry is stale when it was last put more than
// three of its runner's polls before this runner's own put, both
// timestamps the server's (the pods' clocks do not matter): a runner
// killed without a drain stops counting after three polls, and the first
// runner to notice deletes its key. A runner deletes its own key as it
// begins to drain and, through [Epochs.Retire], at exit. The newest epoch
// is the largest among the fresh entries, so after a rollback it falls
// back to the older fleet's.
//
// Create one with [NewEpochs]; the zero value is not usable. Safe for
// concurrent use; calls of Newest and Retire run one at a time.
type Epochs struct {
	kv       jetstream.KeyValue
	bucket   string
	fleet    string
	key      string        // this runner's: <fleet>.<id>
	poll     time.Duration // this runner's poll interval, published with its epoch
	draining func() bool

	mu      sync.Mutex
	last    uint64 // guarded by mu: the last answer
	retired bool   // guarded by mu: the key is deleted for good
}

// epochEntry is the JSON value of a runner's key.
type epochEntry struct {
	Epoch uint64 `json:"epoch"`
	Poll  string `json:"poll"`
}

// NewEpochs creates or updates the bucket (jetstream.CreateOrUpdateKeyValue,
// under ctx) and returns this runner's Epochs, with a key of its own. It
// puts nothing yet: the first call of Newest does. It returns an error
// naming the setting when Fleet or Poll is invalid, and the server's when
// the bucket cannot be created (JetStream not enabled, no permission).
func NewEpochs(ctx context.Context, js jetstream.JetStream, cfg EpochsConfig) (*Epochs, error) {
	if js == nil {
		return nil, errors.New("lameduck: ldnats.NewEpochs: js must not be nil; pass the runner's JetStream handle")
	}
	if cfg.Fleet == "" || strings.Trim(cfg.Fleet, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return nil, fmt.Errorf("lameduck: ldnats.NewEpochs: Fleet=%q: use letters, digits, '_' and '-' only, such as the consumer's name", cfg.Fleet)
	}
	if cfg.Poll < 0 {
		return nil, fmt.Errorf("lameduck: ldnats.NewEpochs: Poll=%s: must not be negative; use the worker's EpochPoll, or zero for %s", cfg.Poll, worker.DefaultEpochPoll)
	}
	if cfg.Poll == 0 {
		cfg.Poll = worker.DefaultEpochPoll
	}
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultEpochBucket
	}
	if cfg.Draining == nil {
		cfg.Draining = func() bool { return false }
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.Bucket, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("lameduck: nats: JetStream key-value bucket %s: %w", cfg.Bucket, err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	return &Epochs{kv: kv, bucket: cfg.Bucket, fleet: cfg.Fleet, key: cfg.Fleet + "." + hex.EncodeToString(id[:]),
		poll: cfg.Poll, draining: cfg.Draining}, nil
}

// Newest puts this runner's entry (mine, and its poll) and returns the
// newest epoch among the fresh entries of its fleet, at least mine,
// deleting the stale ones it finds. From the drain on (Draining) and after
// Retire it deletes the entry instead and returns its last answer (at
// least mine).
//
// Errors: the server's, when a put, the watch of the fleet's keys or a
// delete fails; ctx.Err() when ctx ends first, the watch included (nats.go
// then ends the watch, and what came so far could miss the newest runner);
// an error naming the bucket when the watch ends before its initial values
// are all in (the connection closed); an error naming the key when an
// entry holds something that is not an epoch entry. It never answers from
// part of the fleet. The worker then keeps its last answer.
func (e *Epochs) Newest(ctx context.Context, mine uint64) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.retired || e.draining() {
		return max(e.last, mine), e.retireLocked(ctx)
	}
	val, err := json.Marshal(epochEntry{Epoch: mine, Poll: e.poll.String()})
	if err != nil {
		return 0, err
	}
	if _, err := e.kv.Put(ctx, e.key, val); err != nil {
		return 0, err
	}
	wt, err := e.kv.Watch(ctx, e.fleet+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return 0, err
	}
	defer func() { _ = wt.Stop() }()
	var entries []jetstream.KeyValueEntry
	var now time.Time // the server's time of this runner's put
	for done := false; !done; {
		select {
		case en, open := <-wt.Updates():
			if !open {
				// nats.go closes the channel when the watch's subscription
				// ends: ctx ended (it unsubscribes then) or the connection
				// closed. What came so far is part of the fleet at most,
				// and an answer from it could miss the newest runner: a
				// false rollback.
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				return 0, fmt.Errorf("lameduck: nats: the watch of %s/%s.* ended before its initial values were all in", e.bucket, e.fleet)
			}
			if en == nil { // the initial values are all in
				done = true
				break
			}
			entries = append(entries, en)
			if en.Key() == e.key {
				now = en.Created()
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	newest := mine
	for _, en := range entries {
		var v epochEntry
		if err := json.Unmarshal(en.Value(), &v); err != nil {
			return 0, fmt.Errorf("lameduck: nats: key %s/%s holds %q, not an epoch entry", e.bucket, en.Key(), en.Value())
		}
		poll, err := time.ParseDuration(v.Poll)
		if err != nil || poll <= 0 {
			return 0, fmt.Errorf("lameduck: nats: key %s/%s holds poll %q, not a positive duration", e.bucket, en.Key(), v.Poll)
		}
		if !now.IsZero() && now.Sub(en.Created()) > staleFactor*poll {
			_ = e.kv.Delete(ctx, en.Key(), jetstream.LastRevision(en.Revision())) // unless it was put again meanwhile
			continue
		}
		newest = max(newest, v.Epoch)
	}
	e.last = newest
	return newest, nil
}

// Retire deletes this runner's key for good, under ctx, so the runners
// left stop counting it at once: register it as a closer
// (Lifecycle.AddCloser), so it runs at exit. Later calls of Newest put
// nothing. It returns the server's error when the delete fails (the key
// then stops counting after three polls); a second call does nothing.
func (e *Epochs) Retire(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.retireLocked(ctx)
}

func (e *Epochs) retireLocked(ctx context.Context) error {
	if e.retired {
		return nil
	}
	if err := e.kv.Delete(ctx, e.key); err != nil {
		return fmt.Errorf("lameduck: nats: delete epoch key %s/%s: %w", e.bucket, e.key, err)
	}
	e.retired = true
	return nil
}

package ldnats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lameduck/lameduck/worker"
	"github.com/nats-io/nats.go"
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
	// Replicas is the bucket's number of replicas when NewEpochs creates
	// it: 3 on a clustered JetStream, so the fleet's keys survive a
	// server's loss. Zero means 1. An existing bucket keeps its own.
	// Whatever the replicas, the fleet is read from the bucket stream's
	// leader, never from a replica that may lag.
	Replicas int
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
	stream   jetstream.Stream // the bucket's, KV_<bucket>: the fleet is read from it
	nc       *nats.Conn       // js's: the leader's reads
	api      string           // the JetStream API prefix, "$JS.API."
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

// NewEpochs opens the bucket, or creates it when it does not exist (file
// storage, Replicas replicas; under ctx), looks up its stream (KV_<bucket>, which Newest reads), and
// returns this runner's Epochs, with a key of its own. It puts nothing
// yet: the first call of Newest does. It returns an error naming the
// setting when Fleet, Poll or Replicas is invalid, and the server's when the bucket
// cannot be created or its stream read (JetStream not enabled, no
// permission).
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
	if cfg.Replicas < 0 {
		return nil, fmt.Errorf("lameduck: ldnats.NewEpochs: Replicas=%d: must not be negative; use 1, or 3 on a clustered JetStream", cfg.Replicas)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.Bucket, Storage: jetstream.FileStorage, Replicas: max(cfg.Replicas, 1)})
		if errors.Is(err, jetstream.ErrBucketExists) { // another runner made it meanwhile
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lameduck: nats: JetStream key-value bucket %s: %w", cfg.Bucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("lameduck: nats: the stream of key-value bucket %s (KV_%s): %w", cfg.Bucket, cfg.Bucket, err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	api := apiPrefix(js)
	return &Epochs{kv: kv, stream: st, nc: js.Conn(), api: api, bucket: cfg.Bucket, fleet: cfg.Fleet, key: cfg.Fleet + "." + hex.EncodeToString(id[:]),
		poll: cfg.Poll, draining: cfg.Draining}, nil
}

// Newest puts this runner's entry (mine, and its poll) and returns the
// newest epoch among the fresh entries of its fleet, at least mine,
// deleting the stale ones it finds. From the drain on (Draining) and after
// Retire it deletes the entry instead and returns its last answer (at
// least mine).
//
// It reads the fleet from the bucket's stream, not from a watch: the
// stream's subjects under <Fleet>.* (one stream info request), then the
// last message of each (a direct get each), so every runner whose key
// exists is seen even while the others put theirs. A watch of the bucket
// (nats.go's KeyValue.Watch) may end its initial values early while the
// keys it reads are being put, and miss a runner: the answer then falls
// back for one poll, and a superseded runner takes jobs (a false
// rollback). The delete markers it finds, of retired and stale runners,
// it purges (up to the marker, so a put that follows it stays), so a
// fleet's subjects do not grow with every rollout.
//
// Errors: the server's, when the put, the stream info or a get fails;
// ctx.Err() when ctx ends first; an error naming the key when an entry
// holds something that is not an epoch entry. It never answers from part
// of the fleet. The worker then keeps its last answer.
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
	prefix := "$KV." + e.bucket + "."
	info, err := e.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+e.fleet+".*"))
	if err != nil {
		return 0, fmt.Errorf("lameduck: nats: the keys of %s/%s.*: %w", e.bucket, e.fleet, err)
	}
	subjects := slices.Sorted(maps.Keys(info.State.Subjects))
	type entry struct {
		key string
		seq uint64
		at  time.Time // the server's time of the put
		val []byte
	}
	var entries []entry
	var now time.Time // the server's time of this runner's put
	for _, subj := range subjects {
		m, err := e.lastFromLeader(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged since the info
		}
		if err != nil {
			return 0, fmt.Errorf("lameduck: nats: key %s/%s: %w", e.bucket, strings.TrimPrefix(subj, prefix), err)
		}
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
			// A delete marker: a runner that retired, or one found stale.
			_ = e.stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(m.Sequence+1))
			continue
		}
		en := entry{key: strings.TrimPrefix(subj, prefix), seq: m.Sequence, at: m.Time, val: m.Data}
		if en.key == e.key {
			now = en.at
		}
		entries = append(entries, en)
	}
	newest := mine
	for _, en := range entries {
		var v epochEntry
		if err := json.Unmarshal(en.val, &v); err != nil {
			return 0, fmt.Errorf("lameduck: nats: key %s/%s holds %q, not an epoch entry", e.bucket, en.key, en.val)
		}
		poll, err := time.ParseDuration(v.Poll)
		if err != nil || poll <= 0 {
			return 0, fmt.Errorf("lameduck: nats: key %s/%s holds poll %q, not a positive duration", e.bucket, en.key, v.Poll)
		}
		if !now.IsZero() && now.Sub(en.at) > staleFactor*poll {
			_ = e.kv.Delete(ctx, en.key, jetstream.LastRevision(en.seq)) // unless it was put again meanwhile
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

// lastFromLeader reads the last message of subj from the stream's leader
// ($JS.API.STREAM.MSG.GET), never through a direct get: a key-value
// bucket allows direct gets, which any replica of a clustered stream may
// answer, and a lagging follower would miss the newest runner's key (a
// false rollback) or show a retired one alive.
func (e *Epochs) lastFromLeader(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subj})
	if err != nil {
		return nil, err
	}
	reply, err := e.nc.RequestWithContext(ctx, e.api+"STREAM.MSG.GET."+e.stream.CachedInfo().Config.Name, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("the stream leader's answer: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("the stream leader: %s (code %d, %d)", resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, errors.New("the stream leader answered no message")
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time, Header: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("the stream leader's headers: %w", err)
		}
	}
	return m, nil
}

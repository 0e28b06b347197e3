package lameduck

import (
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// tracker records the requests in flight on the application's servers, so
// that teardown can name what it cut (method, path, age).
//
// Its hot path (begin/end, on every request) allocates nothing and writes no
// shared counter: records come from a sync.Pool, which keeps them per P, and
// each record belongs for life to one of several sharded intrusive lists, so
// concurrent requests rarely meet on one lock or one cache line. begin and end are safe for
// concurrent use; no lock is held across a callback or I/O.
type tracker struct {
	clock  Clock
	next   atomic.Uint32 // spreads new records over the shards
	pool   sync.Pool
	shards [trackShards]trackShard
}

const trackShards = 16

type trackShard struct {
	mu   sync.Mutex
	head *reqRecord // guarded by mu
	n    int64      // records linked; guarded by mu
	_    [40]byte   // keep shards on separate cache lines
}

// reqRecord is one request in flight. Its fields are written before it is
// linked and cleared after it is unlinked, both under the shard's lock.
type reqRecord struct {
	method, path string
	start        time.Time
	prev, next   *reqRecord
	shard        *trackShard
}

func newTracker(c Clock) *tracker {
	t := &tracker{clock: c}
	t.pool.New = func() any {
		return &reqRecord{shard: &t.shards[t.next.Add(1)%trackShards]}
	}
	return t
}

// begin records r as in flight and returns the record to pass to end.
func (t *tracker) begin(r *http.Request) *reqRecord {
	rec := t.pool.Get().(*reqRecord)
	rec.method, rec.path, rec.start = r.Method, r.URL.Path, t.clock.Now()
	s := rec.shard
	s.mu.Lock()
	rec.next = s.head
	if s.head != nil {
		s.head.prev = rec
	}
	s.head = rec
	s.n++
	s.mu.Unlock()
	return rec
}

// end removes rec from the in-flight set and recycles it.
func (t *tracker) end(rec *reqRecord) {
	s := rec.shard
	s.mu.Lock()
	s.n--
	if rec.prev != nil {
		rec.prev.next = rec.next
	} else {
		s.head = rec.next
	}
	if rec.next != nil {
		rec.next.prev = rec.prev
	}
	s.mu.Unlock()
	*rec = reqRecord{shard: s}
	t.pool.Put(rec)
}

// InFlightRequest describes one request that was in flight, as a teardown
// log line or a test reads it.
type InFlightRequest struct {
	Method string
	Path   string
	// Age is how long the request had been running, by the Lifecycle's clock.
	Age time.Duration
}

// inflight returns how many requests are in flight.
func (t *tracker) inflight() int64 {
	var n int64
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += s.n
		s.mu.Unlock()
	}
	return n
}

// snapshot returns the requests in flight, oldest first.
func (t *tracker) snapshot() []InFlightRequest {
	now := t.clock.Now()
	var out []InFlightRequest
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for r := s.head; r != nil; r = r.next {
			out = append(out, InFlightRequest{Method: r.method, Path: r.path, Age: now.Sub(r.start)})
		}
		s.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Age > out[j].Age })
	return out
}

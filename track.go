package lameduck

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tracker records the application requests in flight on the registered
// servers and when traffic last moved, so that teardown can wait for them
// and name what it cut (method, path, age), and the idle drain can tell when
// the pod's traffic has stopped (DrainIdle).
//
// Its hot path (begin/end, on every request) allocates nothing and writes no
// shared counter: records come from a sync.Pool, which keeps them per P, and
// each record belongs for life to one of several sharded intrusive lists, so
// concurrent requests rarely meet on one lock or one cache line. On the
// system clock, while serving, it reads no clock per request: arrivals are
// stamped from a coarse clock (see arrival), to within coarseTick;
// completions are stamped only from the shutdown signal on, when the idle
// drain needs them, and from then on every stamp reads the clock. begin and
// end are safe for concurrent use; no lock is held across a callback or I/O.
type tracker struct {
	clock     Clock
	sys       bool          // clock is the system clock: read it the cheap way
	base      time.Time     // offsets below are durations since base
	next      atomic.Uint32 // spreads new records over the shards
	pool      sync.Pool
	shards    [trackShards]trackShard
	stampEnds atomic.Bool   // completions move the idle clock (set at the signal)
	touched   atomic.Int64  // offset of the last KeepAlive; 0 if none
	anyHijack atomic.Bool   // some connection was hijacked: end() must forget it
	hijacked  sync.Map      // net.Conn → struct{}: connections hijacked and not yet ended
	fresh     sync.Map      // net.Conn → struct{}: accepted, no request read yet (StateNew)
	nFresh    atomic.Int64  // entries in fresh
	ended     chan struct{} // a request ended while stamping; capacity 1, never closed

	// The coarse clock: an offset refreshed every coarseTick by a timer
	// that runs only while requests keep arriving (see arrival).
	coarse      atomic.Int64  // offset of the last refresh
	ticking     atomic.Bool   // the timer is armed and coarse is fresh
	tickMu      sync.Mutex    // guards tick
	tick        *time.Timer   // made on first use; its func is refresh
	lastArrived atomic.Uint64 // arrivals counted at the last refresh
}

const trackShards = 16

// coarseTick bounds how stale an arrival's stamp may be while serving: an
// in-flight request's Age and the idle drain's last pre-signal arrival are
// exact to within it. It is far below any idle window (seconds).
const coarseTick = 10 * time.Millisecond

type trackShard struct {
	mu       sync.Mutex
	head     *reqRecord    // guarded by mu
	n        int64         // records linked; guarded by mu
	last     time.Duration // offset of the last arrival (or, once stamping, completion); guarded by mu
	arrivals uint64        // requests begun; guarded by mu
	_        [88]byte      // 128 bytes: no two shards share a cache line (or an adjacent-line prefetch pair)
}

// reqRecord is one request in flight. Its fields are written before it is
// linked and cleared after it is unlinked, both under the shard's lock.
type reqRecord struct {
	method, path string
	start        time.Duration // offset of the arrival
	req          *http.Request // for the connection, on the cold paths only; nil for TrackRequest
	hijacked     bool          // Tracked.Hijacked: its connection left the server's care
	conn         net.Conn      // the hijacked connection of a TrackRequest record
	prev, next   *reqRecord
	shard        *trackShard
	t            *tracker // immutable
}

func newTracker(c Clock) *tracker {
	_, sys := c.(systemClock)
	t := &tracker{clock: c, sys: sys, base: c.Now(), ended: make(chan struct{}, 1)}
	t.pool.New = func() any {
		return &reqRecord{shard: &t.shards[t.next.Add(1)%trackShards], t: t}
	}
	return t
}

// now returns the clock's time as an offset from base. On the system clock
// it reads only the monotonic clock (time.Since), half the cost of
// time.Now, which also reads the wall clock.
func (t *tracker) now() time.Duration {
	if t.sys {
		return time.Since(t.base)
	}
	return t.clock.Now().Sub(t.base)
}

// arrival returns the time stamp of a request arriving now.
//
// On an injected clock, and from the shutdown signal on, it reads the
// clock. On the system clock while serving it reads the coarse clock
// instead, which costs one atomic load where a clock read costs tens of
// nanoseconds (more on a virtual machine): a timer refreshes it every
// coarseTick for as long as requests keep arriving, and stops once a tick
// has seen none, so an idle server runs no timer. The first request after
// such a pause reads the clock itself and starts the timer again.
func (t *tracker) arrival() time.Duration {
	if !t.sys || t.stampEnds.Load() {
		return t.now()
	}
	if t.ticking.Load() {
		return time.Duration(t.coarse.Load())
	}
	now := t.now()
	if t.ticking.CompareAndSwap(false, true) {
		t.coarse.Store(int64(now))
		t.tickMu.Lock()
		if t.tick == nil {
			t.tick = time.AfterFunc(coarseTick, t.refresh)
		} else {
			t.tick.Reset(coarseTick)
		}
		t.tickMu.Unlock()
	}
	return now
}

// refresh is the coarse clock's timer: it reads the clock, and arms itself
// again only if requests arrived since its last run (and the signal has not
// come: from then on every stamp reads the clock).
func (t *tracker) refresh() {
	t.coarse.Store(int64(t.now()))
	var arrived uint64
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		arrived += s.arrivals
		s.mu.Unlock()
	}
	if arrived != t.lastArrived.Swap(arrived) && !t.stampEnds.Load() {
		t.tickMu.Lock()
		t.tick.Reset(coarseTick)
		t.tickMu.Unlock()
		return
	}
	t.ticking.Store(false)
}

// begin records a request as in flight and returns the record to pass to
// end. r, when not nil, is the net/http request (for its connection).
func (t *tracker) begin(method, path string, r *http.Request) *reqRecord {
	rec := t.pool.Get().(*reqRecord)
	rec.method, rec.path, rec.start, rec.req = method, path, t.arrival(), r
	s := rec.shard
	s.mu.Lock()
	rec.next = s.head
	if s.head != nil {
		s.head.prev = rec
	}
	s.head = rec
	s.n++
	s.arrivals++
	if rec.start > s.last {
		s.last = rec.start
	}
	s.mu.Unlock()
	return rec
}

// end removes rec from the in-flight set and recycles it.
func (t *tracker) end(rec *reqRecord) {
	if rec.req != nil && t.anyHijack.Load() {
		t.forgetHijack(rec.req)
	}
	var now time.Duration
	stamp := t.stampEnds.Load()
	if stamp {
		now = t.now()
	}
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
	if stamp && now > s.last {
		s.last = now
	}
	s.mu.Unlock()
	*rec = reqRecord{shard: s, t: t}
	t.pool.Put(rec)
	if stamp {
		t.wake()
	}
}

// waitIdle waits until no request is in flight or ctx ends. It must only be
// called once stamping is on (after the signal), when every end wakes it.
func (t *tracker) waitIdle(ctx context.Context) {
	for t.inflight() > 0 {
		select {
		case <-t.ended:
		case <-ctx.Done():
			return
		}
	}
}

// forgetHijack drops r's connection from the hijacked set.
func (t *tracker) forgetHijack(r *http.Request) {
	if c := connOf(r); c != nil {
		defer func() { _ = recover() }() // an unhashable net.Conn is never tracked
		t.hijacked.Delete(c)
	}
}

// touch moves the idle clock to now (Lifecycle.KeepAlive).
func (t *tracker) touch() { t.touched.Store(int64(max(t.now(), 1))) }

// connState is chained into every application server's ConnState: it notes
// the connections that leave the server's care by Hijack (WebSockets).
//
// It also counts the connections accepted whose first request has not been
// read (StateNew), so that teardown, having closed the listeners, can let
// them be read before http.Server.Shutdown, which drops a request it reads
// after it has begun.
func (t *tracker) connState(c net.Conn, st http.ConnState) {
	defer func() {
		// A net.Conn whose dynamic type cannot be a map key (a struct
		// value holding a slice) is not tracked; it must not crash.
		_ = recover()
	}()
	switch st {
	case http.StateNew:
		t.fresh.Store(c, struct{}{})
		t.nFresh.Add(1)
		return
	case http.StateHijacked:
		t.anyHijack.Store(true)
		t.hijacked.Store(c, struct{}{})
	}
	if t.nFresh.Load() > 0 {
		if _, was := t.fresh.LoadAndDelete(c); was {
			t.nFresh.Add(-1)
			t.wake()
		}
	}
}

// closeFresh closes every connection that has sent no request yet and
// returns how many it closed.
func (t *tracker) closeFresh() int {
	n := 0
	t.fresh.Range(func(k, _ any) bool {
		if c, ok := k.(net.Conn); ok {
			_ = c.Close()
			n++
		}
		return true
	})
	return n
}

// wake tells a waiter (waitIdle, waitFresh) that something ended.
func (t *tracker) wake() {
	select {
	case t.ended <- struct{}{}:
	default:
	}
}

// waitFresh waits until every accepted connection has had its first
// request read (or closed), or ctx ends.
func (t *tracker) waitFresh(ctx context.Context) {
	for t.nFresh.Load() > 0 {
		select {
		case <-t.ended:
		case <-ctx.Done():
			return
		}
	}
}

func (t *tracker) isHijacked(r *http.Request) (ok bool) {
	if r == nil || !t.anyHijack.Load() {
		return false
	}
	c := connOf(r)
	if c == nil {
		return false
	}
	defer func() { _ = recover() }() // an unhashable net.Conn is never tracked
	_, ok = t.hijacked.Load(c)
	return ok
}

type connKey struct{}

// connContext is chained into every application server's ConnContext: it
// remembers each request's connection, so teardown can close a hijacked one
// that outlives the budget. One allocation per connection, none per request.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

func connOf(r *http.Request) net.Conn {
	if r == nil {
		return nil
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return c
}

// InFlightRequest describes one request that was in flight, as a teardown
// log line or a test reads it.
type InFlightRequest struct {
	Method string
	Path   string
	// Age is how long the request had been running, by the Lifecycle's clock.
	Age time.Duration
	// Hijacked is true for a request whose connection left the HTTP server's
	// care (a WebSocket): http.Server.Shutdown neither waits for nor closes
	// it, so lameduck does.
	Hijacked bool

	conn net.Conn
}

// snapshot returns the requests in flight, oldest first.
func (t *tracker) snapshot() []InFlightRequest {
	now := t.now()
	var out []InFlightRequest
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for r := s.head; r != nil; r = r.next {
			conn := r.conn
			if conn == nil {
				conn = connOf(r.req)
			}
			// Clone: a TrackRequest caller's strings may alias a buffer
			// that its server reuses once the request has ended.
			out = append(out, InFlightRequest{Method: strings.Clone(r.method), Path: strings.Clone(r.path),
				Age: now - r.start, Hijacked: r.hijacked || t.isHijacked(r.req), conn: conn})
		}
		s.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Age > out[j].Age })
	return out
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

// activity returns how many requests are in flight on connections still in
// the HTTP server's care (hijacked ones aside: a WebSocket that sends no
// KeepAlive does not hold the idle drain), and when traffic last moved: the
// latest arrival, completion (from the signal on) or KeepAlive.
func (t *tracker) activity() (busy int, last time.Time) {
	var off time.Duration
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for r := s.head; r != nil; r = r.next {
			if !r.hijacked && !t.isHijacked(r.req) {
				busy++
			}
		}
		off = max(off, s.last)
		s.mu.Unlock()
	}
	off = max(off, time.Duration(t.touched.Load()))
	if off == 0 {
		return busy, time.Time{} // no traffic at all
	}
	return busy, t.base.Add(off)
}

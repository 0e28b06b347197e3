package lameduck

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// tracker records the application requests in flight on the registered
// servers and when traffic last moved, so that teardown can wait for them
// and name what it cut (method, path, age), and the idle drain can tell when
// the pod's traffic has stopped (DrainIdle).
//
// Its hot path (begin/end, on every request) allocates nothing, takes no
// lock and makes three atomic writes: one that publishes the request's record
// as in flight, and at its end one that takes it back (checking that it is
// still that request's, see reqRecord) and one that frees it. Records come from a sync.Pool, which keeps
// them per P, so a request writes memory its processor wrote last; every
// record ever made is listed, by a weak pointer, in a registry that the cold
// paths (snapshot, activity, inflight) walk, and that a record joins once,
// when it is made. A reader that wants a record's fields holds it (an atomic
// state, see reqRecord) for the few nanoseconds it copies them; end waits for
// that hold to pass, so a reader never sees a record half rewritten and a
// TrackRequest caller's strings stay valid while they are copied. On the
// system clock, while serving, it reads no clock per request: arrivals are
// stamped from a coarse clock (see arrival), to within coarseTick;
// completions are stamped only from the shutdown signal on, when the idle
// drain needs them, and from then on every stamp reads the clock. begin and
// end are safe for concurrent use; no lock is held across a callback or I/O.
type tracker struct {
	clock Clock
	sys   bool      // clock is the system clock: read it the cheap way
	base  time.Time // offsets below are durations since base
	pool  sync.Pool

	regMu    sync.Mutex
	reg      []weak.Pointer[reqRecord] // guarded by regMu: every record made and not yet collected
	regPrune int                       // guarded by regMu: the length at which reg drops collected records

	_         [64]byte     // the fields below are read on every request and written rarely
	stampEnds atomic.Bool  // completions move the idle clock (set at the signal)
	anyHijack atomic.Bool  // some connection was hijacked: end() must forget it
	ticking   atomic.Bool  // the coarse clock's timer is armed and coarse is fresh
	arrived   atomic.Bool  // a request arrived since the coarse clock's last refresh
	coarse    atomic.Int64 // the coarse clock: offset of its last refresh
	lastMove  atomic.Int64 // offset of the latest arrival (or, once stamping, completion); 0 if none
	_         [64]byte

	// Late arrivals (late.go): from the signal on, an arrival at or after
	// lateFrom (an offset; 0 until the signal arms it) is counted, for the
	// log line that names a router still sending to a terminating pod.
	lateFrom atomic.Int64
	lateN    atomic.Int64 // arrivals counted as late
	lateLast atomic.Int64 // offset of the latest of them

	touched  atomic.Int64  // offset of the last KeepAlive; 0 if none
	hijacked sync.Map      // net.Conn → struct{}: connections hijacked and not yet ended
	fresh    sync.Map      // net.Conn → struct{}: accepted, no request read yet (StateNew)
	nFresh   atomic.Int64  // entries in fresh
	ended    chan struct{} // a request ended while stamping; capacity 1, never closed

	// The coarse clock's timer, which runs only while requests keep
	// arriving (see arrival).
	tickMu sync.Mutex  // guards tick
	tick   *time.Timer // made on first use; its func is refresh
}

// coarseTick bounds how stale an arrival's stamp may be while serving: an
// in-flight request's Age and the idle drain's last pre-signal arrival are
// exact to within it. It is far below any idle window (seconds).
const coarseTick = 10 * time.Millisecond

// A reqRecord's state word holds its generation above its state bits (see
// reqRecord).
const (
	recFree  uint64 = iota // in the pool or on its way there: no reader reads its fields
	recBusy                // a request in flight: its fields are set
	recHeld                // in flight, and a reader (or Hijacked, or end) is reading or editing its fields
	recState uint64 = 3    // the state bits
	recGen   uint64 = 4    // one generation: added each time the record is handed to a request
)

// reqRecord is one request in flight. Its owner (the request's goroutine)
// writes its fields while it is free, then publishes it (state recBusy);
// from then on only a holder (recHeld) reads or changes them, until end
// frees it again, which waits for any hold to pass.
//
// The state word also counts the requests the record has served (its
// generation, the bits above recState): begin starts a new generation, and
// a Tracked names the generation it began. end and Hijacked act only while
// the record is in that generation and in flight, so a Tracked ended twice,
// or used after its record went back to the pool and on to another request,
// touches nothing (it reads no field either: the generation is checked by
// the same compare-and-swap that takes the record).
type reqRecord struct {
	state    atomic.Uint64 // generation | recFree, recBusy or recHeld
	method   string
	path     string
	start    time.Duration // offset of the arrival
	req      *http.Request // for the connection, on the cold paths only; nil for TrackRequest
	hijacked bool          // Tracked.Hijacked: its connection left the server's care
	conn     net.Conn      // the hijacked connection of a TrackRequest record
	t        *tracker      // immutable
}

// hold takes rec for reading or editing its fields and returns the state
// word to hand back to release, or reports false when rec is not in flight.
func (rec *reqRecord) hold() (uint64, bool) {
	for {
		s := rec.state.Load()
		switch s & recState {
		case recFree:
			return 0, false
		case recBusy:
			if rec.state.CompareAndSwap(s, s&^recState|recHeld) {
				return s, true
			}
		default:
			runtime.Gosched() // another holder copies a few fields
		}
	}
}

// holdGen is hold for the owner of generation gen: it reports false, and
// holds nothing, when rec is no longer in flight in that generation (its
// request has ended, and the record may serve another one by now).
func (rec *reqRecord) holdGen(gen uint64) bool {
	for {
		switch s := rec.state.Load(); s {
		case gen | recBusy:
			if rec.state.CompareAndSwap(s, gen|recHeld) {
				return true
			}
		case gen | recHeld:
			runtime.Gosched() // a reader copies a few fields
		default:
			return false
		}
	}
}

// release hands back a hold; s is what hold returned.
func (rec *reqRecord) release(s uint64) { rec.state.Store(s) }

func newTracker(c Clock) *tracker {
	_, sys := c.(systemClock)
	t := &tracker{clock: c, sys: sys, base: c.Now(), ended: make(chan struct{}, 1), regPrune: 64}
	t.pool.New = t.newRecord
	return t
}

// newRecord makes a record and lists it in the registry, dropping from it
// the records the collector has taken (the pool lets idle ones go) whenever
// it has doubled since the last time.
func (t *tracker) newRecord() any {
	rec := &reqRecord{t: t}
	w := weak.Make(rec)
	t.regMu.Lock()
	if len(t.reg) >= t.regPrune {
		t.reg = slices.DeleteFunc(t.reg, func(w weak.Pointer[reqRecord]) bool { return w.Value() == nil })
		t.regPrune = max(64, 2*len(t.reg))
	}
	t.reg = append(t.reg, w)
	t.regMu.Unlock()
	return rec
}

// each calls f for every record in the registry that is still alive,
// with the registry locked (f must not make a record).
func (t *tracker) each(f func(rec *reqRecord)) {
	t.regMu.Lock()
	defer t.regMu.Unlock()
	for _, w := range t.reg {
		if rec := w.Value(); rec != nil {
			f(rec)
		}
	}
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

// arrival returns the time stamp of a request arriving now, and notes that
// traffic moved.
//
// On an injected clock, and from the shutdown signal on, it reads the
// clock. On the system clock while serving it reads the coarse clock
// instead, which costs one atomic load where a clock read costs tens of
// nanoseconds (more on a virtual machine): a timer refreshes it every
// coarseTick for as long as requests keep arriving, and stops once a tick
// has seen none, so an idle server runs no timer. The first request after
// such a pause reads the clock itself and starts the timer again.
func (t *tracker) arrival() time.Duration {
	var now time.Duration
	switch {
	case !t.sys || t.stampEnds.Load():
		now = t.now()
	case t.ticking.Load():
		now = time.Duration(t.coarse.Load())
	default:
		now = t.now()
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
	}
	if t.stampEnds.Load() {
		t.noteLate(now)
	}
	// Both written at most once per coarse tick while serving: a write per
	// request would cost as much as the rest of the tracking.
	if !t.arrived.Load() {
		t.arrived.Store(true)
	}
	t.moved(now)
	return now
}

// moved raises lastMove to off, unless it is there already.
func (t *tracker) moved(off time.Duration) {
	for {
		last := t.lastMove.Load()
		if int64(off) <= last || t.lastMove.CompareAndSwap(last, int64(off)) {
			return
		}
	}
}

// refresh is the coarse clock's timer: it reads the clock, and arms itself
// again only if requests arrived since its last run (and the signal has not
// come: from then on every stamp reads the clock).
func (t *tracker) refresh() {
	t.coarse.Store(int64(t.now()))
	if t.arrived.Swap(false) && !t.stampEnds.Load() {
		t.tickMu.Lock()
		t.tick.Reset(coarseTick)
		t.tickMu.Unlock()
		return
	}
	t.ticking.Store(false)
}

// begin records a request as in flight and returns the record and its
// generation to pass to end. r, when not nil, is the net/http request (for
// its connection).
func (t *tracker) begin(method, path string, r *http.Request) (*reqRecord, uint64) {
	rec := t.pool.Get().(*reqRecord)
	rec.method, rec.path, rec.start, rec.req = method, path, t.arrival(), r
	gen := rec.state.Load()&^recState + recGen // free: nobody else writes it
	rec.state.Store(gen | recBusy)             // publish: readers see the fields written above
	return rec, gen
}

// end removes rec from the in-flight set and recycles it, if it is still in
// flight in generation gen; otherwise (a second end, or one after the record
// was reused) it does nothing.
func (t *tracker) end(rec *reqRecord, gen uint64) {
	// Taken first, before any field is read: a stale caller stops here.
	// The hold waits for a reader copying the fields.
	if !rec.holdGen(gen) {
		return
	}
	if rec.req != nil && t.anyHijack.Load() {
		t.forgetHijack(rec.req)
	}
	stamp := t.stampEnds.Load()
	if stamp {
		// Before the record is freed: a waiter that sees nothing in flight
		// sees this completion too.
		t.moved(t.now())
	}
	rec.method, rec.path, rec.req, rec.conn, rec.hijacked = "", "", nil, nil, false
	rec.state.Store(gen | recFree)
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
	var out []InFlightRequest
	t.each(func(r *reqRecord) {
		held, ok := r.hold()
		if !ok {
			return
		}
		// The clock is read once the record is held: a request is stamped
		// before it is published, so no age comes out negative (a request
		// that began after one clock read for the whole walk would).
		now := t.now()
		conn := r.conn
		if conn == nil {
			conn = connOf(r.req)
		}
		// Clone: a TrackRequest caller's strings may alias a buffer
		// that its server reuses once the request has ended.
		out = append(out, InFlightRequest{Method: strings.Clone(r.method), Path: strings.Clone(r.path),
			Age: now - r.start, Hijacked: r.hijacked || t.isHijacked(r.req), conn: conn})
		r.release(held)
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Age > out[j].Age })
	return out
}

// inflight returns how many requests are in flight.
func (t *tracker) inflight() int64 {
	var n int64
	t.each(func(r *reqRecord) {
		if r.state.Load()&recState != recFree {
			n++
		}
	})
	return n
}

// activity returns how many requests are in flight on connections still in
// the HTTP server's care (hijacked ones aside: a WebSocket that sends no
// KeepAlive does not hold the idle drain), and when traffic last moved: the
// latest arrival, completion (from the signal on) or KeepAlive.
func (t *tracker) activity() (busy int, last time.Time) {
	t.each(func(r *reqRecord) {
		held, ok := r.hold()
		if !ok {
			return
		}
		if !r.hijacked && !t.isHijacked(r.req) {
			busy++
		}
		r.release(held)
	})
	off := max(time.Duration(t.lastMove.Load()), time.Duration(t.touched.Load()))
	if off == 0 {
		return busy, time.Time{} // no traffic at all
	}
	return busy, t.base.Add(off)
}

// InFlight returns the application requests in flight on the registered
// servers, oldest first. Probe and /prestop requests are not counted.
func (l *Lifecycle) InFlight() []InFlightRequest { return l.track.snapshot() }

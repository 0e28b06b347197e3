package sourcetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/worker"
)

// memqueue is a small queue server over TCP for the suite's own tests, with
// the semantics the suite expects of a real one: a delivery limit with a
// dead-letter list, an ack wait after which a delivered job that was
// neither acknowledged nor kept alive is delivered again (a delivery
// counted), pull requests that the server answers with a job or, at their
// expiry, with EMPTY, and a NAK that can keep a job deliverable whatever
// its deliveries (a fresh delivery count, as a re-publish would give).
//
// The protocol is one line per message. Client to server:
//
//	FETCH <rid> <wait ms>              a pull request for one job
//	ACK <rid> <tag>                    the job is done
//	NAK <rid> <tag> <delay ms> <keep>  hand the job back; keep 1 gives it a fresh delivery count
//	TOUCH <rid> <tag>                  the job still runs: restart its ack wait
//
// Server to client: JOB <rid> <tag> <delivery> <id>, EMPTY <rid>,
// OK <rid>, ERR <rid> <why>.
type memServer struct {
	addr    string
	ackWait time.Duration
	wake    chan struct{}
	done    chan struct{} // closed by close: the dispatcher returns
	wg      sync.WaitGroup

	mu         sync.Mutex
	ln         net.Listener          // guarded by mu
	conns      map[*srvConn]struct{} // guarded by mu
	maxDeliver int                   // guarded by mu
	msgs       map[uint64]*memMsg    // guarded by mu: by sequence; ready, delayed or delivered
	byTag      map[uint64]*memMsg    // guarded by mu: the delivered ones
	dead       []string              // guarded by mu
	waiters    []*waiter             // guarded by mu: pull requests, oldest first
	seq, tag   uint64                // guarded by mu
	connsWG    sync.WaitGroup        // the connections' goroutines
}

type memMsg struct {
	id         string
	seq        uint64
	deliveries int
	readyAt    time.Time
	tag        uint64 // 0: not delivered now
	ackBy      time.Time
}

type waiter struct {
	c       *srvConn
	rid     string
	expires time.Time
}

type srvConn struct {
	c net.Conn

	mu     sync.Mutex
	out    chan string // guarded by mu against its close
	closed bool        // guarded by mu
}

func (c *srvConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *srvConn) closeLocked() {
	if !c.closed {
		c.closed = true
		_ = c.c.Close()
		close(c.out)
	}
}

// send queues a line for the connection's writer; a connection that does
// not keep up is closed, and a closed one drops the line, as a dead socket
// would.
func (c *srvConn) send(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	select {
	case c.out <- line:
	default:
		c.closeLocked()
	}
}

func newMemServer(ackWait time.Duration) (*memServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &memServer{addr: ln.Addr().String(), ackWait: ackWait, wake: make(chan struct{}, 1), done: make(chan struct{}),
		ln: ln, conns: map[*srvConn]struct{}{}, msgs: map[uint64]*memMsg{}, byTag: map[uint64]*memMsg{}}
	s.wg.Go(func() { s.accept(ln) })
	s.wg.Go(s.dispatch)
	return s, nil
}

func (s *memServer) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *memServer) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		sc := &srvConn{c: c, out: make(chan string, 8192)}
		s.mu.Lock()
		if s.ln != ln { // cut while it was being accepted
			s.mu.Unlock()
			_ = c.Close()
			continue
		}
		s.conns[sc] = struct{}{}
		s.connsWG.Add(2)
		s.mu.Unlock()
		go func() {
			defer s.connsWG.Done()
			w := bufio.NewWriter(c)
			for line := range sc.out {
				_, _ = w.WriteString(line + "\n")
				if len(sc.out) == 0 {
					if w.Flush() != nil {
						sc.close()
					}
				}
			}
		}()
		go func() {
			defer s.connsWG.Done()
			s.serve(sc)
		}()
	}
}

func (s *memServer) serve(c *srvConn) {
	defer func() {
		c.close()
		s.mu.Lock()
		delete(s.conns, c)
		kept := s.waiters[:0]
		for _, w := range s.waiters {
			if w.c != c {
				kept = append(kept, w)
			}
		}
		s.waiters = kept
		s.mu.Unlock()
	}()
	r := bufio.NewScanner(c.c)
	for r.Scan() {
		f := strings.Fields(r.Text())
		if len(f) < 2 {
			return
		}
		s.handle(c, f)
	}
}

func (s *memServer) handle(c *srvConn, f []string) {
	rid := f[1]
	num := func(i int) int64 {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return n
	}
	// delivered returns the message delivered under the tag f[2], or nil
	// once it has answered that there is none.
	delivered := func() *memMsg {
		m := s.byTag[uint64(num(2))]
		if m == nil {
			c.send("ERR " + rid + " no-such-delivery")
		}
		return m
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch f[0] {
	case "FETCH":
		s.waiters = append(s.waiters, &waiter{c: c, rid: rid, expires: now.Add(time.Duration(num(2)) * time.Millisecond)})
		s.poke()
	case "ACK":
		m := delivered()
		if m == nil {
			return
		}
		delete(s.byTag, m.tag)
		delete(s.msgs, m.seq)
		c.send("OK " + rid)
	case "NAK":
		m := delivered()
		if m == nil {
			return
		}
		delete(s.byTag, m.tag)
		m.tag = 0
		if num(4) == 1 {
			m.deliveries = 0
		} else if s.maxDeliver > 0 && m.deliveries >= s.maxDeliver {
			delete(s.msgs, m.seq)
			s.dead = append(s.dead, m.id)
			c.send("OK " + rid)
			return
		}
		m.readyAt = now.Add(time.Duration(num(3)) * time.Millisecond)
		s.poke()
		c.send("OK " + rid)
	case "TOUCH":
		if m := delivered(); m != nil {
			m.ackBy = now.Add(s.ackWait)
			c.send("OK " + rid)
		}
	default:
		c.send("ERR " + rid + " unknown-command")
	}
}

// dispatch matches ready jobs to pull requests, expires requests and ack
// waits, until the server closes.
func (s *memServer) dispatch() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := s.step(time.Now())
		t.Reset(time.Until(next))
		select {
		case <-s.done:
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

func (s *memServer) step(now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := now.Add(time.Hour)
	var ready []*memMsg
	for _, m := range s.msgs {
		switch {
		case m.tag != 0 && !now.Before(m.ackBy): // the ack wait passed: delivered again, or dead
			delete(s.byTag, m.tag)
			m.tag = 0
			if s.maxDeliver > 0 && m.deliveries >= s.maxDeliver {
				delete(s.msgs, m.seq)
				s.dead = append(s.dead, m.id)
				continue
			}
			m.readyAt = now
			ready = append(ready, m)
		case m.tag != 0:
			next = minTime(next, m.ackBy)
		case !now.Before(m.readyAt):
			ready = append(ready, m)
		default:
			next = minTime(next, m.readyAt)
		}
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].seq < ready[j].seq })
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		switch {
		case len(ready) > 0:
			m := ready[0]
			ready = ready[1:]
			s.tag++
			m.tag, m.ackBy = s.tag, now.Add(s.ackWait)
			m.deliveries++
			s.byTag[m.tag] = m
			next = minTime(next, m.ackBy)
			w.c.send(fmt.Sprintf("JOB %s %d %d %s", w.rid, m.tag, m.deliveries, m.id))
		case !now.Before(w.expires):
			w.c.send("EMPTY " + w.rid)
		default:
			next = minTime(next, w.expires)
			kept = append(kept, w)
		}
	}
	s.waiters = kept
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *memServer) reset(_ context.Context, maxDeliver int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxDeliver = maxDeliver
	s.msgs, s.byTag, s.dead = map[uint64]*memMsg{}, map[uint64]*memMsg{}, nil
	return nil
}

func (s *memServer) publish(_ context.Context, ids []string) error {
	now := time.Now()
	s.mu.Lock()
	for _, id := range ids {
		s.seq++
		s.msgs[s.seq] = &memMsg{id: id, seq: s.seq, readyAt: now}
	}
	s.mu.Unlock()
	s.poke()
	return nil
}

func (s *memServer) count(context.Context) (Counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts{Pending: len(s.msgs), DeadLettered: len(s.dead), DeadIDs: append([]string{}, s.dead...)}, nil
}

// cut closes the listener and every connection, and waits for their
// goroutines; the jobs stay.
func (s *memServer) cut() {
	s.mu.Lock()
	ln := s.ln
	s.ln = nil
	conns := make([]*srvConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
	s.connsWG.Wait()
}

// restart stops serving and listens again on the same address, with its
// jobs, their delivery counts and ack waits kept.
func (s *memServer) restart(ctx context.Context) error {
	s.cut()
	for {
		ln, err := net.Listen("tcp", s.addr)
		if err == nil {
			s.mu.Lock()
			s.ln = ln
			s.mu.Unlock()
			s.wg.Go(func() { s.accept(ln) })
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("memqueue: listen again on %s: %w", s.addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *memServer) close() {
	s.cut()
	close(s.done)
	s.wg.Wait()
	s.connsWG.Wait()
}

// A memSource's variants: the correct one, and ones broken on purpose.
const (
	correct      = ""
	earlyFetch   = "early-fetch"   // Fetch gives up at half its wait and drops what the queue delivers to the request later
	nakCounts    = "nak-counts"    // HandBack ignores HandBackCause: every hand-back counts against the delivery limit
	handBackAcks = "handback-acks" // HandBack with the runner's cause acknowledges the job: it is gone
)

// memSource is the Source of a memServer: one connection, shared by the
// loops, dialed again when it fails; jobs in flight kept alive by TOUCH.
type memSource struct {
	addr    string
	variant string
	ackWait time.Duration
	rid     atomic.Uint64
	stop    chan struct{}
	wg      sync.WaitGroup // the readers and the keeper

	mu     sync.Mutex
	conn   *clientConn         // guarded by mu: nil or failed → dialed again
	live   map[uint64]struct{} // guarded by mu: tags of jobs delivered and not yet settled
	closed bool                // guarded by mu
}

type reply struct {
	kind  string // JOB, EMPTY, OK, ERR
	tag   uint64
	deliv int
	id    string
	err   error
}

type clientConn struct {
	c    net.Conn
	wmu  sync.Mutex
	dead chan struct{}

	mu        sync.Mutex
	pending   map[string]chan reply // guarded by mu
	abandoned map[string]bool       // guarded by mu: FETCH requests given up on: a late job is handed back
}

func newMemSource(addr, variant string, ackWait time.Duration) *memSource {
	s := &memSource{addr: addr, variant: variant, ackWait: ackWait, stop: make(chan struct{}), live: map[uint64]struct{}{}}
	s.wg.Go(s.keep)
	return s
}

// connect returns the live connection, dialing one when there is none.
func (s *memSource) connect() (*clientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("memqueue: source closed")
	}
	if s.conn != nil {
		select {
		case <-s.conn.dead:
		default:
			return s.conn, nil
		}
	}
	c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("memqueue: dial %s: %w", s.addr, err)
	}
	cc := &clientConn{c: c, dead: make(chan struct{}), pending: map[string]chan reply{}, abandoned: map[string]bool{}}
	s.conn = cc
	s.wg.Go(func() { s.read(cc) })
	return cc, nil
}

func (s *memSource) read(cc *clientConn) {
	defer func() {
		_ = cc.c.Close()
		cc.mu.Lock()
		for rid, ch := range cc.pending {
			ch <- reply{err: errors.New("memqueue: connection lost")}
			delete(cc.pending, rid)
		}
		cc.abandoned = map[string]bool{}
		cc.mu.Unlock()
		close(cc.dead)
	}()
	sc := bufio.NewScanner(cc.c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			return
		}
		r := reply{kind: f[0]}
		if r.kind == "JOB" && len(f) == 5 {
			tag, _ := strconv.ParseUint(f[2], 10, 64)
			d, _ := strconv.Atoi(f[3])
			r.tag, r.deliv, r.id = tag, d, f[4]
		}
		if r.kind == "ERR" {
			r.err = fmt.Errorf("memqueue: server: %s", strings.Join(f[2:], " "))
		}
		cc.mu.Lock()
		ch, ok := cc.pending[f[1]]
		delete(cc.pending, f[1])
		late := cc.abandoned[f[1]]
		delete(cc.abandoned, f[1])
		cc.mu.Unlock()
		switch {
		case ok:
			ch <- r
		case late && r.kind == "JOB": // delivered to a request its Fetch gave up on: back at once
			s.sendNoWait(cc, fmt.Sprintf("NAK x %d 0 1", r.tag))
		}
	}
}

func (s *memSource) sendNoWait(cc *clientConn, line string) {
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	_ = cc.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, _ = cc.c.Write([]byte(line + "\n"))
}

// request sends a line and waits for its reply, up to bound.
// A request given up on with abandon set is remembered: a job the server
// delivers to it later is handed back at once.
func (s *memSource) request(ctx context.Context, cc *clientConn, rid, line string, bound time.Duration, abandon bool) (reply, bool) {
	ch := make(chan reply, 1)
	cc.mu.Lock()
	cc.pending[rid] = ch
	cc.mu.Unlock()
	s.sendNoWait(cc, line)
	worker.Consuming(ctx)
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r := <-ch:
		return r, true
	case <-t.C:
	case <-ctx.Done():
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	delete(cc.pending, rid)
	select {
	case r := <-ch: // it came as we gave up
		return r, true
	default:
	}
	if abandon {
		cc.abandoned[rid] = true
	}
	return reply{}, false
}

func (s *memSource) nextRID() string { return strconv.FormatUint(s.rid.Add(1), 10) }

func (s *memSource) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	cc, err := s.connect()
	if err != nil {
		return nil, err
	}
	rid := s.nextRID()
	bound := wait + 2*time.Second
	if s.variant == earlyFetch {
		bound = wait / 2
	}
	r, ok := s.request(ctx, cc, rid, fmt.Sprintf("FETCH %s %d", rid, wait.Milliseconds()), bound, s.variant != earlyFetch)
	if !ok {
		if s.variant == earlyFetch {
			return nil, nil // the bug: the request stays open at the server, and what it delivers is dropped
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("memqueue: fetch: %w", worker.ErrNoReply)
	}
	switch {
	case r.err != nil:
		return nil, r.err
	case r.kind == "EMPTY":
		return nil, nil
	case r.kind == "JOB":
		s.mu.Lock()
		s.live[r.tag] = struct{}{}
		s.mu.Unlock()
		return &memJob{s: s, tag: r.tag, id: r.id, delivery: r.deliv}, nil
	}
	return nil, fmt.Errorf("memqueue: unexpected reply %q", r.kind)
}

// keep touches every job delivered and not settled, a third of an ack wait
// apart, so a job held long is not delivered again.
func (s *memSource) keep() {
	t := time.NewTicker(s.ackWait / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		tags := make([]uint64, 0, len(s.live))
		for tag := range s.live {
			tags = append(tags, tag)
		}
		cc := s.conn
		s.mu.Unlock()
		if cc == nil {
			continue
		}
		for _, tag := range tags {
			s.sendNoWait(cc, fmt.Sprintf("TOUCH x %d", tag))
		}
	}
}

// settle sends ACK or NAK for a job and waits for the server's word.
func (s *memSource) settle(ctx context.Context, tag uint64, line func(rid string) string) error {
	s.mu.Lock()
	delete(s.live, tag)
	s.mu.Unlock()
	cc, err := s.connect()
	if err != nil {
		return err
	}
	rid := s.nextRID()
	r, ok := s.request(ctx, cc, rid, line(rid), 5*time.Second, false)
	switch {
	case !ok:
		return errors.New("memqueue: no reply; the server redelivers the job after its ack wait")
	case r.err != nil:
		return r.err
	}
	return nil
}

// Drain waits until every request given up on has been answered by the
// server (its expiry), so no job can reach this Source any more.
func (s *memSource) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		cc := s.conn
		s.mu.Unlock()
		n := 0
		if cc != nil {
			cc.mu.Lock()
			n = len(cc.abandoned)
			cc.mu.Unlock()
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("memqueue: %d fetch request(s) given up on are still open at the server; a job it delivers to them is redelivered after the ack wait", n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *memSource) close() {
	s.mu.Lock()
	s.closed = true
	cc := s.conn
	s.mu.Unlock()
	if cc != nil {
		_ = cc.c.Close()
	}
	close(s.stop)
	s.wg.Wait()
}

type memJob struct {
	s        *memSource
	tag      uint64
	id       string
	delivery int
}

func (j *memJob) ID() string    { return j.id }
func (j *memJob) Delivery() int { return j.delivery }

func (j *memJob) Ack(ctx context.Context) error {
	return j.s.settle(ctx, j.tag, func(rid string) string { return fmt.Sprintf("ACK %s %d", rid, j.tag) })
}

func (j *memJob) HandBack(ctx context.Context, delay time.Duration) error {
	keep := worker.HandBackCause(ctx) != nil
	switch {
	case j.s.variant == nakCounts:
		keep = false
	case j.s.variant == handBackAcks && keep:
		return j.Ack(ctx)
	}
	k := 0
	if keep {
		k = 1
	}
	return j.s.settle(ctx, j.tag, func(rid string) string { return fmt.Sprintf("NAK %s %d %d %d", rid, j.tag, delay.Milliseconds(), k) })
}

// memHarness describes srv to the suite, its Sources of the given variant.
func memHarness(srv *memServer, variant string) Harness {
	name := "memqueue"
	if variant != correct {
		name += "/" + variant
	}
	return Harness{
		Name:    name,
		Addr:    srv.addr,
		Reset:   srv.reset,
		Publish: srv.publish,
		Count:   srv.count,
		Restart: srv.restart,
		// The server's goroutines restart with it.
		IgnoreGoroutines: []string{"sourcetest.(*memServer)."},
		NewSource: func(_ context.Context, addr string) (worker.Source, func(), error) {
			s := newMemSource(addr, variant, srv.ackWait)
			if _, err := s.connect(); err != nil {
				s.close()
				return nil, nil, err
			}
			return s, s.close, nil
		},
	}
}

package sourcetest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Relay is a TCP relay between a queue's clients and its server: it
// forwards every connection made to [Relay.Addr] to the target address,
// delays each direction by a fixed latency, and can cut every connection
// at once, as a broken network or a failed node would. The suite dials the
// queue through one; a Source's own tests may use one too.
//
// Each chunk of bytes read from one side is written to the other side no
// earlier than the latency after it was read, in the order it was read, so
// a latency L adds L to each direction and 2L to a round trip while keeping
// the stream's throughput. An end of stream (a half close) is forwarded
// after the bytes before it.
//
// Create one with [NewRelay]; the zero value is not usable. Its methods are
// safe for concurrent use. Close joins every goroutine it started.
type Relay struct {
	ln      net.Listener
	target  string
	latency atomic.Int64 // time.Duration added to each direction

	mu     sync.Mutex
	pairs  map[*pair]struct{} // guarded by mu: the connections being relayed
	closed bool               // guarded by mu: Close was called
	wg     sync.WaitGroup     // the accept loop and every pair's pipes
}

// pair is one relayed connection: the client's and the one to the target.
type pair struct {
	client, server net.Conn
	once           sync.Once
}

// cut closes both connections of p; abrupt resets them (SO_LINGER 0), as a
// broken network would, instead of ending them cleanly.
func (p *pair) cut(abrupt bool) {
	p.once.Do(func() {
		for _, c := range []net.Conn{p.client, p.server} {
			if tc, ok := c.(*net.TCPConn); ok && abrupt {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// NewRelay listens on a free loopback port and relays every connection made
// to it to target (host:port), adding latency (a time.Duration, zero for
// none, negative is an error) to each direction. The target is dialed once
// per accepted connection, within 5s; a connection whose dial fails is
// closed at once, as a server that is down would be seen. It returns an
// error for a negative latency or when it cannot listen.
func NewRelay(target string, latency time.Duration) (*Relay, error) {
	if latency < 0 {
		return nil, fmt.Errorf("lameduck: sourcetest.NewRelay(%q): latency=%s must not be negative; use 0 for none", target, latency)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lameduck: sourcetest.NewRelay(%q): %w", target, err)
	}
	r := &Relay{ln: ln, target: target, pairs: make(map[*pair]struct{})}
	r.latency.Store(int64(latency))
	r.wg.Go(r.accept)
	return r, nil
}

// Addr returns the address clients dial (127.0.0.1:port) to reach the
// target through the relay.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// SetLatency sets the latency added to each direction, a time.Duration,
// from the next chunk read on; a negative value counts as zero. Chunks
// already read keep the time they were given, and order is kept.
func (r *Relay) SetLatency(d time.Duration) { r.latency.Store(int64(max(d, 0))) }

// Break cuts every connection being relayed now, resetting both of its
// sides (SO_LINGER 0): clients and server see the connection fail, bytes
// in flight are lost. Later connections are relayed as before. It returns
// once every connection is closed; the relay's goroutines for them end
// soon after.
func (r *Relay) Break() {
	r.mu.Lock()
	pairs := make([]*pair, 0, len(r.pairs))
	for p := range r.pairs {
		pairs = append(pairs, p)
	}
	r.mu.Unlock()
	for _, p := range pairs {
		p.cut(true)
	}
}

// Conns returns how many connections are being relayed now: accepted and
// not yet ended on both sides. The suite reads it to find connections a
// closed Source left open.
func (r *Relay) Conns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pairs)
}

// Close stops accepting connections, cuts those being relayed (as Break
// does) and waits for every goroutine of the relay to return. It returns
// the listener's close error, if any; a second call returns nil.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	err := r.ln.Close()
	r.Break()
	r.wg.Wait()
	return err
}

// accept relays each accepted connection until the listener closes.
func (r *Relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Go(func() { r.relay(c) })
	}
}

// relay dials the target for the client connection c and pipes both ways
// until both directions have ended or the pair is cut.
func (r *Relay) relay(c net.Conn) {
	s, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		_ = c.Close() // the server is down: the client sees its connection end
		return
	}
	p := &pair{client: c, server: s}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		p.cut(true)
		return
	}
	r.pairs[p] = struct{}{}
	r.mu.Unlock()
	var both sync.WaitGroup
	both.Go(func() { r.pipe(p, c, s) })
	both.Go(func() { r.pipe(p, s, c) })
	both.Wait()
	p.cut(false)
	r.mu.Lock()
	delete(r.pairs, p)
	r.mu.Unlock()
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk delayed by the latency at its read.
// At src's end it half-closes dst after the last chunk; on a write error
// it cuts the pair.
func (r *Relay) pipe(p *pair, src, dst net.Conn) {
	q := make(chan chunk, 1024)
	var w sync.WaitGroup
	w.Go(func() {
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		failed := false
		for ch := range q {
			if failed {
				continue // drain q so the reader never blocks on it
			}
			if d := time.Until(ch.due); d > 0 {
				t.Reset(d)
				<-t.C
			}
			if _, err := dst.Write(ch.b); err != nil {
				failed = true
				p.cut(false)
			}
		}
		if !failed {
			closeWrite(dst)
		}
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(r.latency.Load()))}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.cut(false) // reset or closed: the other direction ends too
			}
			break
		}
	}
	close(q)
	w.Wait()
}

// closeWrite half-closes c when it can, so the peer reads the end of
// stream after the last byte.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

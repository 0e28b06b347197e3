package testsupport

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// AnswerRelay is a TCP relay between a client under test and a real server
// that forwards what the client sends at once and lets the test hold back
// only the server's answers: Mute drops them (the server ran the request;
// its answer is lost on the way back), SetDelay delays them (a congested
// return path). Each chunk of an answer is judged when it is read from the
// server: dropped if muted then, otherwise written to the client no
// earlier than the delay then in force after, in the order read.
//
// Make one with NewAnswerRelay; its methods are safe for concurrent use.
// Every goroutine it starts is joined by t's cleanup, which closes the
// listener and every relayed connection.
type AnswerRelay struct {
	ln    net.Listener
	muted atomic.Bool
	delay atomic.Int64 // a time.Duration
	mu    sync.Mutex
	conns []net.Conn // guarded by mu
	wg    sync.WaitGroup
}

// NewAnswerRelay listens on a free port of 127.0.0.1 and relays each
// connection made to it to target (host:port), dialled once per accepted
// connection; a connection whose dial fails is closed at once. It starts
// neither muted nor delayed. It fails t when it cannot listen.
func NewAnswerRelay(t testing.TB, target string) *AnswerRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &AnswerRelay{ln: ln}
	a.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			a.mu.Lock()
			a.conns = append(a.conns, c, s)
			a.mu.Unlock()
			a.wg.Go(func() { // client -> server: at once, then a half close
				_, _ = io.Copy(s, c)
				if tc, ok := s.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			})
			a.wg.Go(func() { a.answers(s, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		a.mu.Lock()
		for _, c := range a.conns {
			c.Close()
		}
		a.mu.Unlock()
		a.wg.Wait()
	})
	return a
}

// answers relays what the server s sends to the client c, dropping or
// delaying each chunk as the relay is set when it is read.
func (a *AnswerRelay) answers(s, c net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 1024)
	a.wg.Go(func() {
		defer c.Close()
		for ch := range q {
			time.Sleep(time.Until(ch.due))
			if _, err := c.Write(ch.b); err != nil {
				for range q { // let the reader finish
				}
				return
			}
		}
	})
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 && !a.muted.Load() {
			q <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(time.Duration(a.delay.Load()))}
		}
		if err != nil {
			return
		}
	}
}

// Addr returns the address the client dials ("127.0.0.1:port").
func (a *AnswerRelay) Addr() string { return a.ln.Addr().String() }

// Mute drops the server's answers read from now on (true), or relays them
// again (false).
func (a *AnswerRelay) Mute(on bool) { a.muted.Store(on) }

// SetDelay delays each chunk of the server's answers read from now on by
// d; zero or negative relays them at once. Chunks already read keep the
// time they were given.
func (a *AnswerRelay) SetDelay(d time.Duration) { a.delay.Store(int64(max(d, 0))) }

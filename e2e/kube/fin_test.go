package kube_test

import (
	"net"
	"testing"
	"time"
)

// TestFinConnTellsALateWrite shows finConn's peek on real sockets: a
// write on an open connection, even with unread bytes waiting, is not
// late; one after the server closed the connection is. It needs no
// cluster.
func TestFinConnTellsALateWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c := &finConn{Conn: raw}
	srv, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil || c.late.Load() {
		t.Fatalf("a write on an open connection: err %v, late %v; want nil, false", err, c.late.Load())
	}
	if _, err := srv.Write([]byte("HTTP/1.1 200 OK\r\n")); err != nil {
		t.Fatal(err)
	}
	waitPeer(t, func() bool { return pending(raw) })
	if _, err := c.Write([]byte("x")); err != nil || c.late.Load() {
		t.Fatalf("a write with the server's bytes unread: err %v, late %v; want nil, false", err, c.late.Load())
	}
	buf := make([]byte, 64)
	if _, err := raw.Read(buf); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	waitPeer(t, func() bool { return peerClosed(raw) })
	c.Write([]byte("GET / HTTP/1.1\r\n\r\n")) // may fail or not: the kernel took it or the reset came first
	if !c.late.Load() {
		t.Fatal("a write after the server closed the connection was not seen as late")
	}
}

// pending reports whether the kernel holds bytes from the peer for c.
func pending(c net.Conn) bool {
	n, _ := peek(c)
	return n > 0
}

// waitPeer waits, at most 5s, for what the peer sent to reach this end.
func waitPeer(t *testing.T, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("what the peer sent did not arrive within 5s")
		}
	}
}

package sourcetest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c); _ = c.Close() })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// roundTrip writes a line and reads it back through c.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) time.Duration {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	began := time.Now()
	if _, err := fmt.Fprintln(c, line); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if got != line+"\n" {
		t.Fatalf("read %q; want %q", got, line)
	}
	return time.Since(began)
}

// dialRelay returns a Relay to target with latency and a connection
// dialled through it, both closed when t ends; it fails t when either
// cannot be made.
func dialRelay(t *testing.T, target string, latency time.Duration) (*Relay, net.Conn) {
	t.Helper()
	r, err := NewRelay(target, latency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return r, c
}

// The relay adds its latency to each direction, keeps the order of the
// bytes, cuts every connection on Break and relays new ones after it.
func TestRelay(t *testing.T) {
	r, c := dialRelay(t, echoServer(t), 50*time.Millisecond)
	br := bufio.NewReader(c)
	if d := roundTrip(t, c, br, "one"); d < 100*time.Millisecond {
		t.Fatalf("round trip %s; want at least 2 × 50ms", d)
	}
	for i := range 50 { // written back to back, read in order
		if _, err := fmt.Fprintln(c, i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		got, err := br.ReadString('\n')
		if err != nil || got != fmt.Sprintln(i) {
			t.Fatalf("line %d: read %q, %v", i, got, err)
		}
	}
	r.SetLatency(0)
	if d := roundTrip(t, c, br, "two"); d > 90*time.Millisecond {
		t.Fatalf("round trip %s after SetLatency(0); want well under 100ms", d)
	}
	if n := r.Conns(); n != 1 {
		t.Fatalf("Conns() = %d; want 1", n)
	}

	r.Break()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("the connection still reads after Break")
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Conns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Conns() = %d 5s after Break; want 0", r.Conns())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c2, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	roundTrip(t, c2, bufio.NewReader(c2), "after the break")

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if c3, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		c3.Close()
		t.Fatal("the relay accepts connections after Close")
	}
}

// A relay to a server that is down closes each connection at once.
func TestRelayToAServerThatIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, c := dialRelay(t, addr, 0)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection to a server that is down reads")
	}
	if _, err := NewRelay(addr, -time.Second); err == nil {
		t.Fatal("NewRelay accepts a negative latency")
	}
}

package main

// End-to-end tests of the drain (nothing dropped) on the real
// `lameduck demo` binary: the idle drain, the keep-alive and HTTP/2
// hand-off, WebSockets closed with 1001 or force-closed at the budget,
// server-sent events ended cleanly, the reject mode, and upgrades refused
// after the signal.
//
// They reuse e2e_test.go's harness (startDemo, waitDraining, waitExit, the
// log reader). As there, no test sleeps to synchronise: the only pauses are
// traffic cadences (a request every 50ms, 200ms or 500ms), and every wait is
// on a log line, a probe answer, a frame or the process's exit, under a
// deadline. Timing bounds are generous for a loaded 2-core box but real.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fetched is one HTTP answer, read in full, with what the connection did.
type fetched struct {
	code     int
	header   http.Header
	raw      string
	body     map[string]any // the body as a JSON object; nil when it is not
	close    bool           // resp.Close: the server said Connection: close (HTTP/1)
	proto    int            // resp.ProtoMajor
	reused   bool           // the connection of the last attempt had served a request before
	conn     string         // the local address of the connection of the last attempt
	attempts int            // GotConn calls: more than one means the transport retried
	sent     time.Time      // just before the request was handed to the client
	at       time.Time      // when the answer had been read
}

func (f fetched) String() string { return fmt.Sprintf("%d %s", f.code, strings.TrimSpace(f.raw)) }

// fetch sends method to url on c and reads the whole answer, recording the
// connection the transport used (httptrace GotConn) for its last attempt.
func fetch(ctx context.Context, c *http.Client, method, url string) (fetched, error) {
	var (
		mu sync.Mutex
		f  fetched
	)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			mu.Lock()
			defer mu.Unlock()
			f.attempts++
			f.reused = i.Reused
			f.conn = i.Conn.LocalAddr().String()
		},
	})
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return fetched{}, err
	}
	sent := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return fetched{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fetched{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	f.code, f.header, f.raw, f.close, f.proto = resp.StatusCode, resp.Header, string(b), resp.Close, resp.ProtoMajor
	f.sent, f.at = sent, time.Now()
	var body map[string]any
	if json.Unmarshal(b, &body) == nil {
		f.body = body
	}
	return f, nil
}

// newClient returns an HTTP/1.1 client of its own, with or without
// keep-alives, whose idle connections are closed when the test ends.
func newClient(t *testing.T, keepAlive bool) *http.Client {
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: !keepAlive}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: reqTimeout}
}

// wantExitZeroWithin waits up to 20s for p to exit and fails t unless it
// exits 0; it reports an error unless p exited less than bound (the
// window and the teardown, with a margin) after sig.
func (p *proc) wantExitZeroWithin(t *testing.T, sig time.Time, bound time.Duration) {
	t.Helper()
	code, at := p.waitExit(20 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	if d := at.Sub(sig); d >= bound {
		t.Errorf("exited %s after SIGTERM; want within delay + teardown", d)
	}
}

// streamClient returns an HTTP/1.1 client of its own with no timeout, for
// a stream that outlives a request's (a WebSocket, server-sent events),
// and a context that bounds the test's dials and reads: 30s, a hang guard.
// The client's idle connections are closed, and the context cancelled,
// when the test ends.
func streamClient(t *testing.T) (*http.Client, context.Context) {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &http.Client{Transport: tr}, ctx
}

// dialWS opens a WebSocket to p's /ws through hc before the signal, and
// fails t if it cannot.
func dialWS(ctx context.Context, t *testing.T, hc *http.Client, p *proc) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(ctx, wsURL(p, "/ws"), &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatalf("websocket dial before the signal: %v", err)
	}
	return c
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// wsURL returns the ws:// URL of path on p.
func wsURL(p *proc, path string) string {
	return "ws://" + strings.TrimPrefix(p.base, "http://") + path
}

// echo writes msg on c and fails unless the same message comes back.
func echo(ctx context.Context, t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("websocket write %q: %v", msg, err)
	}
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("websocket read (echo of %q): %v", msg, err)
	}
	if typ != websocket.MessageText || string(b) != msg {
		t.Fatalf("websocket echo = %v %q; want text %q", typ, b, msg)
	}
}

// 1. Idle drain: a request every 500ms keeps the pod serving well past the
// delay (readiness 503, liveness and the application 200); once the traffic
// stops, the process exits one idle window later, and says idleness ended
// the wait. Probes polled meanwhile do not count as traffic. The idle window
// (3s) is six request intervals long, so a stalled second on a loaded machine
// cannot end it early. The traffic begins before the signal: with no
// application request yet, the idle drain would rightly end at the 500ms
// delay, before a request sent after the signal could arrive.
func TestE2EIdleDrainTrafficHoldsThenIdleEnds(t *testing.T) {
	t.Parallel()
	const delay, idle, traffic = 500 * time.Millisecond, 3 * time.Second, 4 * time.Second
	p := startDemo(t, env("LAMEDUCK_DRAIN_MODE", "idle", "LAMEDUCK_SHUTDOWN_DELAY", "500ms",
		"LAMEDUCK_IDLE_WINDOW", "3s", "LAMEDUCK_DRAIN_TIMEOUT", "30s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	c := newClient(t, true)

	if r, err := fetch(context.Background(), c, http.MethodGet, p.base+"/"); err != nil || r.code != http.StatusOK {
		t.Fatalf("GET / before SIGTERM = %v %v; want 200", r, err)
	}
	sig := p.signal(syscall.SIGTERM)
	p.waitDraining(5 * time.Second)

	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var last fetched
	n := 0
	for {
		if p.hasExited() {
			t.Fatalf("the process exited %s after SIGTERM while a request still came every 500ms (idle window %s)",
				p.exitAt.Sub(sig), idle)
		}
		r, err := fetch(context.Background(), c, http.MethodGet, p.base+"/")
		if err != nil {
			t.Fatalf("GET / %s after SIGTERM, during the idle drain: %v", time.Since(sig), err)
		}
		if r.code != http.StatusOK {
			t.Fatalf("GET / %s after SIGTERM = %s; want 200 (the idle drain injects no 503)", r.at.Sub(sig), r)
		}
		last = r
		n++
		if rz := p.get("/readyz"); rz.code != http.StatusServiceUnavailable || rz.status() != "draining" {
			t.Fatalf("GET /readyz %s after SIGTERM = %s; want 503 draining", time.Since(sig), rz)
		}
		if hz := p.get("/healthz"); hz.code != http.StatusOK || hz.status() != "ok" {
			t.Fatalf("GET /healthz %s after SIGTERM = %s; want 200 ok", time.Since(sig), hz)
		}
		if time.Since(sig) >= traffic {
			break
		}
		<-tick.C
	}
	tick.Stop()
	t.Logf("%d requests after SIGTERM; the last answered %s after it", n, last.at.Sub(sig))

	// The traffic has stopped. Poll liveness (not traffic) until the
	// listener closes: that may only happen once idleness ended the window.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for !p.hasExited() {
		r, err := p.do(context.Background(), p.client, "/healthz")
		if err != nil {
			p.waitLog(`"idle drain done" before the listener closed`, 5*time.Second, msgContains("lameduck: idle drain done"))
			break
		}
		if r.code != http.StatusOK {
			t.Fatalf("GET /healthz %s after the last request = %s; want 200", r.at.Sub(last.at), r)
		}
		if time.Since(last.at) > idle+15*time.Second {
			t.Fatalf("still serving %s after the last request; want an exit one idle window (%s) later", time.Since(last.at), idle)
		}
		<-poll.C
	}

	code, at := p.waitExit(20 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	// The server saw the last request arrive and complete between
	// last.sent and last.at, so its idle window cannot end before
	// last.sent + idle.
	if d := at.Sub(last.sent); d < idle {
		t.Errorf("exited %s after the last request was sent; want no earlier than the %s idle window", d, idle)
	}
	if d := at.Sub(last.at); d >= idle+3*time.Second {
		t.Errorf("exited %s after the last response; want about one idle window (%s), under %s",
			d, idle, idle+3*time.Second)
	}
	if d := at.Sub(sig); d < traffic {
		t.Errorf("exited %s after SIGTERM; the traffic should have held it for at least %s", d, traffic)
	}
	l, ok := p.findLog(msgContains("lameduck: idle drain done"))
	if !ok {
		t.Fatalf("no log line says idleness ended the wait (\"idle drain done\")")
	}
	if l.rec["idle_window"] != "3s" {
		t.Errorf("the idle drain line does not carry idle_window=3s: %s", l.raw)
	}
	if l, ok := p.findLog(msgContains("lameduck: idle drain bound")); ok {
		t.Errorf("the bound, not idleness, is said to have ended the wait: %s", l.raw)
	}
	t.Logf("exit %s after the last response, %s after SIGTERM", at.Sub(last.at), at.Sub(sig))
}

// 2. Idle drain bound: with a request every 200ms (an idle window of 2s is
// never reached, even across a stalled second), the wait ends at
// LAMEDUCK_DRAIN_TIMEOUT after the signal, and the log says the bound ended
// it.
func TestE2EIdleDrainBoundEndsSteadyTraffic(t *testing.T) {
	t.Parallel()
	const bound = 4 * time.Second
	p := startDemo(t, env("LAMEDUCK_DRAIN_MODE", "idle", "LAMEDUCK_SHUTDOWN_DELAY", "200ms",
		"LAMEDUCK_IDLE_WINDOW", "2s", "LAMEDUCK_DRAIN_TIMEOUT", "4s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	c := newClient(t, false)

	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var sig, stopped time.Time
	var inBound, after int
	for i := 0; ; i++ {
		if i == 2 {
			sig = p.signal(syscall.SIGTERM)
		}
		r, err := fetch(context.Background(), c, http.MethodGet, p.base+"/")
		now := time.Now()
		beforeBound := sig.IsZero() || now.Before(sig.Add(bound))
		switch {
		case err == nil && r.code == http.StatusOK:
			if beforeBound {
				inBound++
			} else {
				after++
			}
		case err == nil:
			t.Fatalf("GET / %s after SIGTERM = %s; want 200", now.Sub(sig), r)
		case beforeBound:
			t.Fatalf("GET / failed %s after SIGTERM, before the %s bound: %v", now.Sub(sig), bound, err)
		default:
			t.Logf("GET / %s after SIGTERM (after the bound): %v", now.Sub(sig), err)
			stopped = now
		}
		if !stopped.IsZero() || p.hasExited() {
			break
		}
		if !sig.IsZero() && now.After(sig.Add(bound+15*time.Second)) {
			t.Fatalf("still serving %s after SIGTERM; want the %s bound to end the wait", now.Sub(sig), bound)
		}
		<-tick.C
	}
	tick.Stop()

	code, at := p.waitExit(20 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
	t.Logf("%d answers before the bound, %d after; exit %s after SIGTERM", inBound, after, at.Sub(sig))
	if d := at.Sub(sig); d < bound {
		t.Errorf("exited %s after SIGTERM; steady traffic should have held it until the %s bound", d, bound)
	}
	if d := at.Sub(sig); d >= bound+3*time.Second {
		t.Errorf("exited %s after SIGTERM; want the bound (%s) plus a quick teardown, under %s", d, bound, bound+3*time.Second)
	}
	if _, ok := p.findLog(msgContains("lameduck: idle drain bound")); !ok {
		t.Errorf("no log line says the bound ended the wait (\"idle drain bound\")")
	}
	if l, ok := p.findLog(msgContains("lameduck: idle drain done")); ok {
		t.Errorf("idleness, not the bound, is said to have ended the wait: %s", l.raw)
	}
}

// 3. A WebSocket client reads close status 1001 (going away), not 1006, at
// the end of the window, and the process exits 0.
func TestE2EWebSocketClosedGoingAwayAtWindowEnd(t *testing.T) {
	t.Parallel()
	const delay = 500 * time.Millisecond
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "500ms", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	hc, ctx := streamClient(t)
	c := dialWS(ctx, t, hc, p)
	defer c.CloseNow()
	echo(ctx, t, c, "hello before the signal")

	sig := p.signal(syscall.SIGTERM)
	_, _, err := c.Read(ctx)
	closedAt := time.Now()
	if st := websocket.CloseStatus(err); st != websocket.StatusGoingAway {
		t.Fatalf("websocket read ended %s after SIGTERM with %v (status %v); want a close frame 1001 going away",
			closedAt.Sub(sig), err, st)
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		t.Logf("close frame %d %q, %s after SIGTERM", ce.Code, ce.Reason, closedAt.Sub(sig))
	}
	if closedAt.Before(sig.Add(delay)) {
		t.Errorf("close frame read %s after SIGTERM, before the %s window ended", closedAt.Sub(sig), delay)
	}
	if d := closedAt.Sub(sig); d > delay+3*time.Second {
		t.Errorf("close frame read %s after SIGTERM; want it at the end of the %s window", d, delay)
	}

	code, at := p.waitExit(20 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0 (the client answered the close handshake)", code)
	}
	if d := at.Sub(sig); d >= delay+5*time.Second {
		t.Errorf("exited %s after SIGTERM; want within delay + teardown", d)
	}
}

// rawWS is a WebSocket connection upgraded by hand, whose client side never
// reads or writes again unless the test says so.
type rawWS struct {
	conn net.Conn
	br   *bufio.Reader // holds any bytes read past the 101 response
}

// rawUpgrade dials p, writes a WebSocket upgrade request for path by hand and
// reads the 101 answer, checking Sec-WebSocket-Accept (RFC 6455, 4.2.2).
func rawUpgrade(t *testing.T, p *proc, path string) *rawWS {
	t.Helper()
	addr := strings.TrimPrefix(p.base, "http://")
	conn, err := net.DialTimeout("tcp", addr, reqTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	const key = "dGhlIHNhbXBsZSBub25jZQ==" // RFC 6455's sample nonce: 16 bytes, base64
	req := "GET " + path + " HTTP/1.1\r\n" +
		"Host: " + addr + "\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\n" +
		"Sec-WebSocket-Version: 13\r\n\r\n"
	_ = conn.SetDeadline(time.Now().Add(reqTimeout))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatalf("write the upgrade request: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the upgrade response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		t.Fatalf("upgrade answered %s %q; want 101", resp.Status, b)
	}
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if got, want := resp.Header.Get("Sec-WebSocket-Accept"), base64.StdEncoding.EncodeToString(h[:]); got != want {
		t.Fatalf("Sec-WebSocket-Accept = %q; want %q", got, want)
	}
	_ = conn.SetDeadline(time.Time{})
	return &rawWS{conn: conn, br: br}
}

// 4. A client that completes the upgrade and then never answers the close
// handshake is force-closed at the teardown budget: the process exits
// non-zero within delay + teardown + 1s, the log names the cut request as
// hijacked and counts it, and the client did get the 1001 close frame first.
func TestE2EWebSocketIgnoringCloseIsForceClosed(t *testing.T) {
	t.Parallel()
	const delay, teardown = 500 * time.Millisecond, time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "500ms", "LAMEDUCK_SHUTDOWN_TEARDOWN", "1s"))
	ws := rawUpgrade(t, p, "/ws")

	sig := p.signal(syscall.SIGTERM)
	code, at := p.waitExit(delay + teardown + 15*time.Second)
	if code == 0 {
		t.Errorf("exit code 0; want non-zero after force-closing a connection")
	}
	// The upper bound on the process's own clock (draining line to stopped
	// line): the time this process takes to see the exit is no part of it.
	drained := p.waitLog(`"lameduck: draining"`, time.Second, msgContains("lameduck: draining")).at(t)
	stopped := p.waitLog(`"lameduck: stopped"`, time.Second, msgContains("lameduck: stopped")).at(t)
	if d := stopped.Sub(drained); d >= delay+teardown+time.Second {
		t.Errorf("the process logged stopped %s after draining; want within delay + teardown + 1s = %s", d, delay+teardown+time.Second)
	}
	// The lower bound on this process's clock: sig is stamped before the
	// signal was sent and at after the exit was seen, so a stall only
	// lengthens it.
	if d := at.Sub(sig); d < delay+teardown/2 {
		t.Errorf("exited %s after SIGTERM, before delay + teardown/2 = %s: the connection was cut early", d, delay+teardown/2)
	}
	l, ok := p.findLog(func(l logLine) bool {
		return strings.Contains(l.msg(), "GET /ws") && strings.Contains(l.msg(), "hijacked")
	})
	if !ok {
		t.Fatalf("no log line names the cut request as \"GET /ws (... hijacked)\"")
	}
	if n, _ := l.rec["hijacked_closed"].(float64); n != 1 {
		t.Errorf("the cut line has hijacked_closed=%v; want 1: %s", l.rec["hijacked_closed"], l.raw)
	}

	// What the client was sent: a close frame 1001, then the end of the
	// connection.
	_ = ws.conn.SetReadDeadline(time.Now().Add(reqTimeout))
	b, err := io.ReadAll(ws.br)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("reading what the server sent after the upgrade: %v", err)
	}
	if len(b) < 4 || b[0] != 0x88 || b[1]&0x7f < 2 {
		t.Fatalf("the server sent % x after the upgrade; want a close frame (0x88 ...)", b)
	}
	if st := int(b[2])<<8 | int(b[3]); st != int(websocket.StatusGoingAway) {
		t.Errorf("the close frame carries status %d; want 1001", st)
	}
}

// 5. A server-sent-event client reads a clean end of stream: the body ends
// with the final "bye" event and io.ReadAll returns no error.
func TestE2EServerSentEventsEndCleanly(t *testing.T) {
	t.Parallel()
	const delay = 500 * time.Millisecond
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "500ms", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	hc, ctx := streamClient(t)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /events: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /events = %s, Content-Type %q; want 200 text/event-stream", resp.Status, resp.Header.Get("Content-Type"))
	}
	// Read the first event whole, then send the signal.
	br := bufio.NewReader(resp.Body)
	var first strings.Builder
	for {
		line, err := br.ReadString('\n')
		first.WriteString(line)
		if err != nil {
			t.Fatalf("reading the first event: %v (so far %q)", err, first.String())
		}
		if line == "\n" {
			break
		}
	}
	if !strings.Contains(first.String(), "data: tick 1") {
		t.Fatalf("first event %q; want \"data: tick 1\"", first.String())
	}

	sig := p.signal(syscall.SIGTERM)
	rest, err := io.ReadAll(br)
	ended := time.Now()
	if err != nil {
		t.Fatalf("the event stream ended %s after SIGTERM with %v; want a clean end of stream (after %q)",
			ended.Sub(sig), err, tail(string(rest), 200))
	}
	body := first.String() + string(rest)
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("the stream ends mid-event: %q", tail(body, 200))
	}
	events := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	lastEvent := events[len(events)-1]
	if !strings.HasPrefix(lastEvent, "event: bye\n") {
		t.Fatalf("the last event is %q; want the final \"event: bye\"", lastEvent)
	}
	if n := strings.Count(body, "event: bye"); n != 1 {
		t.Errorf("%d \"bye\" events; want exactly one, last", n)
	}
	if ended.Before(sig.Add(delay)) {
		t.Errorf("the stream ended %s after SIGTERM, before the %s window ended", ended.Sub(sig), delay)
	}
	t.Logf("%d events, the stream ended %s after SIGTERM", len(events), ended.Sub(sig))

	code, _ := p.waitExit(20 * time.Second)
	if code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// 6. A keep-alive HTTP/1.1 client sending every 50ms through the window:
// from the moment the process has said it is draining, every request is
// answered 200 with Connection: close and, but for one last request on the
// connection left idle from before the signal (lameduck does not close idle
// connections under a client at the signal: a POST racing that close could
// not be replayed), goes on a fresh connection; no request fails before the
// window ends; the first refused connection comes no earlier than the
// window's end.
//
// The window is 3s, about sixty request intervals, so a stalled second or
// two of this process still leaves a stream of requests handed over in it.
func TestE2EKeepAliveClientHandedOver(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "3s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	c := newClient(t, true)

	var reusedBefore, ambiguous, handedOver, retried, after int
	var idleConn any         // the connection of the last request before SIGTERM
	lastReuseAllowed := true // its one request after the signal, told to close
	sig, refused := p.requestUntilRefused(6, delay, delay+15*time.Second, func(sig time.Time) (time.Time, bool) {
		// Strict from the moment the "draining" line has been read: the
		// process writes it after it turned keep-alives off.
		_, strict := p.findLog(msgContains("lameduck: draining"))
		r, err := fetch(context.Background(), c, http.MethodGet, p.base+"/")
		now := time.Now()
		inWindow := sig.IsZero() || now.Before(sig.Add(delay))
		switch {
		case err != nil && inWindow:
			t.Fatalf("GET / failed %s after SIGTERM, inside the %s window: %v", now.Sub(sig), delay, err)
		case err != nil && isRefused(err):
			return now, true
		case err != nil:
			t.Logf("GET / %s after SIGTERM (after the window): %v", now.Sub(sig), err)
		case r.code != http.StatusOK:
			t.Fatalf("GET / %s after SIGTERM = %s; want 200", now.Sub(sig), r)
		case sig.IsZero():
			if r.reused {
				reusedBefore++
			}
			idleConn = r.conn
		case !strict:
			ambiguous++ // sent after SIGTERM but maybe before the process saw it
			if r.reused && r.conn == idleConn && r.close {
				lastReuseAllowed = false // the idle connection's last request
			}
		default:
			if r.reused && lastReuseAllowed && r.conn == idleConn && r.close {
				lastReuseAllowed = false
			} else if r.reused {
				t.Errorf("GET / %s after SIGTERM (the process draining) went on a reused connection %s; want a fresh one",
					r.sent.Sub(sig), r.conn)
			}
			if !r.close {
				t.Errorf("GET / %s after SIGTERM (the process draining) was answered without Connection: close", r.sent.Sub(sig))
			}
			if r.attempts > 1 {
				retried++
			}
			if inWindow {
				handedOver++
			} else {
				after++
			}
		}
		return now, false
	})
	t.Logf("reused before SIGTERM: %d; after it: %d unclassified, %d handed over in the window (%d after a transport retry), %d after it; first refusal %s after SIGTERM",
		reusedBefore, ambiguous, handedOver, retried, after, refused.Sub(sig))
	if reusedBefore == 0 {
		t.Errorf("no request reused a connection before SIGTERM; the client is not keep-alive, so the test proves nothing")
	}
	if handedOver < 5 {
		t.Errorf("only %d requests handed over inside the window; want a steady stream (about 60)", handedOver)
	}
	if code, _ := p.waitExit(20 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

// h2Frame is what the test keeps of one HTTP/2 frame a raw connection read.
type h2Frame struct {
	at         time.Time
	typ        http2.FrameType
	stream     uint32
	endStream  bool
	status     string        // :status of a HEADERS frame
	code       http2.ErrCode // GOAWAY and RST_STREAM
	lastStream uint32        // GOAWAY
}

func (f h2Frame) String() string {
	switch f.typ {
	case http2.FrameGoAway:
		return fmt.Sprintf("GOAWAY last_stream=%d %v", f.lastStream, f.code)
	case http2.FrameRSTStream:
		return fmt.Sprintf("RST_STREAM stream=%d %v", f.stream, f.code)
	case http2.FrameHeaders:
		return fmt.Sprintf("HEADERS stream=%d :status=%s end_stream=%v", f.stream, f.status, f.endStream)
	}
	return fmt.Sprintf("%v stream=%d end_stream=%v", f.typ, f.stream, f.endStream)
}

// h2Raw is a client connection speaking h2c with prior knowledge, frame by
// frame (x/net/http2's Framer): it acknowledges SETTINGS and PING itself and
// hands every HEADERS, DATA, GOAWAY and RST_STREAM frame to the test, time
// stamped, in order.
type h2Raw struct {
	t      *testing.T
	conn   net.Conn
	addr   string
	frames chan h2Frame // closed when the connection ends; then err is set
	done   chan struct{}
	err    error // written before frames is closed

	wmu    sync.Mutex // guards the writing half of fr, enc, encBuf, nextID
	fr     *http2.Framer
	enc    *hpack.Encoder
	encBuf bytes.Buffer
	nextID uint32
}

func dialH2C(t *testing.T, p *proc) *h2Raw {
	t.Helper()
	addr := strings.TrimPrefix(p.base, "http://")
	conn, err := net.DialTimeout("tcp", addr, reqTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	h := &h2Raw{t: t, conn: conn, addr: addr, frames: make(chan h2Frame, 256), done: make(chan struct{}), nextID: 1}
	h.enc = hpack.NewEncoder(&h.encBuf)
	h.fr = http2.NewFramer(conn, conn)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		conn.Close()
		t.Fatalf("write the HTTP/2 preface: %v", err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		conn.Close()
		t.Fatalf("write SETTINGS: %v", err)
	}
	go h.read()
	t.Cleanup(func() {
		h.conn.Close()
		<-h.done
	})
	return h
}

// read runs on its own goroutine until the connection ends.
func (h *h2Raw) read() {
	defer close(h.done)
	defer close(h.frames)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.err = err
			return
		}
		fr := h2Frame{at: time.Now(), typ: f.Header().Type, stream: f.Header().StreamID}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WriteSettingsAck() })
			}
			continue
		case *http2.PingFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WritePing(true, f.Data) })
			}
			continue
		case *http2.MetaHeadersFrame:
			fr.status, fr.endStream = f.PseudoValue("status"), f.StreamEnded()
		case *http2.DataFrame:
			fr.endStream = f.StreamEnded()
		case *http2.GoAwayFrame:
			fr.code, fr.lastStream = f.ErrCode, f.LastStreamID
		case *http2.RSTStreamFrame:
			fr.code = f.ErrCode
		default:
			continue // WINDOW_UPDATE and the like
		}
		select {
		case h.frames <- fr:
		default:
			h.err = errors.New("test: too many unread frames")
			return
		}
	}
}

func (h *h2Raw) write(fn func() error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return fn()
}

// get sends GET path on a new stream and returns the stream's ID.
func (h *h2Raw) get(path string) uint32 {
	h.t.Helper()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	id := h.nextID
	h.nextID += 2
	h.encBuf.Reset()
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: h.addr}, {Name: ":path", Value: path},
	} {
		_ = h.enc.WriteField(f)
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.encBuf.Bytes(),
		EndStream: true, EndHeaders: true}); err != nil {
		h.t.Fatalf("h2c: write HEADERS for GET %s: %v", path, err)
	}
	return id
}

// next returns the next frame, or an error when the connection has ended or
// nothing came before deadline.
func (h *h2Raw) next(deadline time.Time) (h2Frame, error) {
	tm := time.NewTimer(time.Until(deadline))
	defer tm.Stop()
	select {
	case f, ok := <-h.frames:
		if !ok {
			return h2Frame{}, fmt.Errorf("the connection ended: %w", h.err)
		}
		return f, nil
	case <-tm.C:
		return h2Frame{}, errors.New("no frame in time")
	}
}

// response reads frames until stream id has ended and returns its :status
// and the GOAWAY frames read meanwhile.
func (h *h2Raw) response(id uint32, timeout time.Duration) (status string, goaways []h2Frame) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		f, err := h.next(deadline)
		if err != nil {
			h.t.Fatalf("h2c: waiting for the response on stream %d: %v", id, err)
		}
		switch {
		case f.typ == http2.FrameGoAway:
			goaways = append(goaways, f)
		case f.stream != id:
		case f.typ == http2.FrameRSTStream:
			h.t.Fatalf("h2c: stream %d reset: %v", id, f)
		case f.typ == http2.FrameHeaders && f.status != "":
			status = f.status
		}
		if f.stream == id && f.endStream {
			return status, goaways
		}
	}
}

// goAway returns the first GOAWAY frame read before deadline.
func (h *h2Raw) goAway(deadline time.Time) (h2Frame, error) {
	for {
		f, err := h.next(deadline)
		if err != nil {
			return h2Frame{}, err
		}
		if f.typ == http2.FrameGoAway {
			return f, nil
		}
		h.t.Logf("h2c: frame before GOAWAY: %v", f)
	}
}

// 7. HTTP/2 (h2c) hand-off. After SIGTERM a busy connection's next
// response is followed by GOAWAY NO_ERROR (well before the window ends),
// and the stdlib h2c client's later requests go over new connections with
// no error; an idle connection, used before the signal and then left alone,
// receives GOAWAY NO_ERROR no later than the end of the window plus a small
// slack. Frames are observed on raw connections with x/net/http2's Framer.
func TestE2EH2CHandOver(t *testing.T) {
	t.Parallel()
	// A 3s window: the five requests below take a quarter of a second, so a
	// stalled second on a loaded machine still leaves them inside it.
	const delay, slack = 3 * time.Second, 2 * time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "3s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))

	// Two raw connections and one stdlib client, each used before the signal.
	busy, idle := dialH2C(t, p), dialH2C(t, p)
	for name, h := range map[string]*h2Raw{"busy": busy, "idle": idle} {
		if st, ga := h.response(h.get("/"), reqTimeout); st != "200" || len(ga) > 0 {
			t.Fatalf("h2c %s connection before the signal: :status %q, GOAWAY %v; want 200 and no GOAWAY", name, st, ga)
		}
	}
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Proxy: nil, Protocols: protos}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: reqTimeout}
	var pre string
	for i := range 2 {
		r, err := fetch(context.Background(), c, http.MethodGet, p.base+"/")
		if err != nil || r.code != http.StatusOK || r.proto != 2 {
			t.Fatalf("h2c client before the signal: %v %v (HTTP/%d); want 200 over HTTP/2", r, err, r.proto)
		}
		if i == 1 && (!r.reused || r.conn != pre) {
			t.Fatalf("the h2c client's second request went on %s (reused %v); want the first one's connection %s", r.conn, r.reused, pre)
		}
		pre = r.conn
	}

	sig := p.signal(syscall.SIGTERM)
	p.waitDraining(5 * time.Second)

	// The busy connection: its next response is followed by GOAWAY.
	id := busy.get("/")
	st, ga := busy.response(id, reqTimeout)
	if st != "200" {
		t.Fatalf("h2c GET / during the window: :status %q; want 200", st)
	}
	if len(ga) == 0 {
		g, err := busy.goAway(sig.Add(delay))
		if err != nil {
			t.Fatalf("h2c: no GOAWAY after the response on stream %d before the window ended: %v", id, err)
		}
		ga = append(ga, g)
	}
	if g := ga[0]; g.code != http2.ErrCodeNo || g.lastStream < id {
		t.Errorf("the busy connection got %v; want GOAWAY NO_ERROR with last stream ≥ %d (its stream completes)", g, id)
	} else {
		t.Logf("busy connection: GOAWAY %s after SIGTERM: %v", g.at.Sub(sig), g)
	}
	if ga[0].at.After(sig.Add(delay)) {
		t.Errorf("the busy connection's GOAWAY came %s after SIGTERM, after the %s window; want it after its next response",
			ga[0].at.Sub(sig), delay)
	}
	busy.conn.Close() // a real client closes an idle connection after GOAWAY

	// The stdlib client: no errors; after the first response on the old
	// connection, every request goes over a new one.
	seen := map[string]bool{pre: true}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := range 5 {
		r, err := fetch(context.Background(), c, http.MethodGet, p.base+"/")
		if err != nil {
			t.Fatalf("h2c client request %d after SIGTERM (%s): %v; want no error", i, time.Since(sig), err)
		}
		if r.code != http.StatusOK || r.proto != 2 {
			t.Fatalf("h2c client request %d after SIGTERM = %s over HTTP/%d; want 200 over HTTP/2", i, r, r.proto)
		}
		if !r.at.Before(sig.Add(delay)) {
			t.Fatalf("h2c client request %d answered %s after SIGTERM, after the window: the box is too slow for this test", i, r.at.Sub(sig))
		}
		switch {
		case i == 0:
			t.Logf("first h2c request after SIGTERM on %s (before it: %s)", r.conn, pre)
		case seen[r.conn]:
			t.Errorf("h2c client request %d after SIGTERM went on %s, a connection that had already answered; want a new one after GOAWAY", i, r.conn)
		}
		seen[r.conn] = true
		<-tick.C
	}
	tick.Stop()

	// The idle connection: GOAWAY NO_ERROR by the end of the window.
	g, err := idle.goAway(sig.Add(delay + 10*time.Second))
	if err != nil {
		t.Fatalf("the idle h2c connection got no GOAWAY within %s of SIGTERM: %v", delay+10*time.Second, err)
	}
	if g.code != http2.ErrCodeNo {
		t.Errorf("the idle connection got %v; want GOAWAY NO_ERROR", g)
	}
	if d := g.at.Sub(sig); d > delay+slack {
		t.Errorf("the idle connection's GOAWAY came %s after SIGTERM; want no later than the %s window + %s", d, delay, slack)
	}
	t.Logf("idle connection: GOAWAY %s after SIGTERM: %v", g.at.Sub(sig), g)
	idle.conn.Close()

	p.wantExitZeroWithin(t, sig, delay+5*time.Second)
}

// 8. Reject mode (LAMEDUCK_SEND_RETRY_AFTER=true): after the window, while a
// slow request is still in flight, new requests on new connections are
// answered 503 with Retry-After: 1 and Connection: close (not refused); the
// slow request completes with 200; the process exits 0.
func TestE2ESendRetryAfterAnswers503DuringTeardown(t *testing.T) {
	t.Parallel()
	const delay, slow = 200 * time.Millisecond, 2 * time.Second
	p := startDemo(t, env("LAMEDUCK_SEND_RETRY_AFTER", "true",
		"LAMEDUCK_SHUTDOWN_DELAY", "200ms", "LAMEDUCK_SHUTDOWN_TEARDOWN", "10s"))
	c := newClient(t, false)

	slowSent := time.Now()
	slowCh := p.startRequest(context.Background(), "/slow?d=2s")
	sig := p.signal(syscall.SIGTERM)

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var ok200, n503 int
	var first503 fetched
	var slowRes *result
	for {
		select {
		case res := <-slowCh:
			slowRes = &res
		default:
		}
		if slowRes != nil {
			break
		}
		r, err := fetch(context.Background(), c, http.MethodGet, p.base+"/")
		now := time.Now()
		if err != nil {
			// The slow request arrived after slowSent, so it cannot have
			// finished before slowSent + 2s: until then the listener must
			// stay open. Once it has finished, the listener closes, and a
			// connection caught in its backlog as it closes may be refused
			// or reset (EOF).
			if n503 > 0 && !now.Before(slowSent.Add(slow)) {
				t.Logf("GET / %s after SIGTERM, once GET /slow?d=2s could have finished: %v", now.Sub(sig), err)
				res := awaitResult(t, slowCh, reqTimeout)
				slowRes = &res
				break
			}
			t.Fatalf("GET / %s after SIGTERM failed: %v; want 200 in the window, then 503 Retry-After while a request is in flight",
				now.Sub(sig), err)
		}
		switch r.code {
		case http.StatusOK:
			if n503 > 0 {
				t.Fatalf("GET / %s after SIGTERM = 200 after a 503; the reject mode must not end while a request is in flight", now.Sub(sig))
			}
			ok200++
		case http.StatusServiceUnavailable:
			if n503 == 0 {
				first503 = r
			}
			n503++
			if r.at.Before(sig.Add(delay)) {
				t.Errorf("503 %s after SIGTERM, inside the %s window; want 200 until the window ends", r.at.Sub(sig), delay)
			}
			if got := r.header.Get("Retry-After"); got != "1" {
				t.Errorf("503 with Retry-After %q; want \"1\"", got)
			}
			if !r.close {
				t.Errorf("503 without Connection: close")
			}
		default:
			t.Fatalf("GET / %s after SIGTERM = %s; want 200 or 503", now.Sub(sig), r)
		}
		if now.After(sig.Add(slow + 15*time.Second)) {
			t.Fatalf("GET /slow?d=2s not answered %s after SIGTERM", now.Sub(sig))
		}
		<-tick.C
	}
	tick.Stop()
	t.Logf("%d answered 200 in the window, %d answered 503 (first %s after SIGTERM: %s)", ok200, n503, first503.at.Sub(sig), first503)
	if n503 == 0 {
		t.Errorf("no request was answered 503 Retry-After while GET /slow?d=2s was in flight after the window")
	} else if !strings.Contains(first503.raw, "shutting down") {
		t.Errorf("the 503 body %q does not say the instance is shutting down", first503.raw)
	}
	if slowRes.err != nil {
		t.Fatalf("the in-flight GET /slow?d=2s failed: %v", slowRes.err)
	}
	if slowRes.code != http.StatusOK || slowRes.body["slept"] != "2s" {
		t.Fatalf("the in-flight GET /slow?d=2s = %s; want 200 {\"slept\":\"2s\"}", slowRes.reply)
	}
	p.wantExitZeroWithin(t, sig, delay+10*time.Second)
}

// 9. A WebSocket upgrade attempted during the window is answered 503, so
// the client retries elsewhere; one before the signal succeeds.
//
// The dial and the plain request must both come inside the window; a 4s
// window leaves seconds of margin for a loaded machine.
func TestE2EWebSocketUpgradeRefusedAfterSignal(t *testing.T) {
	t.Parallel()
	const delay = 4 * time.Second
	p := startDemo(t, env("LAMEDUCK_SHUTDOWN_DELAY", "4s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s"))
	hc, ctx := streamClient(t)
	c := dialWS(ctx, t, hc, p)
	echo(ctx, t, c, "before the signal")
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close the first websocket: %v", err)
	}

	sig := p.signal(syscall.SIGTERM)
	p.waitDraining(5 * time.Second)
	c, resp, err := websocket.Dial(ctx, wsURL(p, "/ws"), &websocket.DialOptions{HTTPClient: hc})
	answered := time.Now()
	if err == nil {
		c.CloseNow()
		t.Fatalf("websocket dial %s after SIGTERM succeeded; want 503", answered.Sub(sig))
	}
	if !answered.Before(sig.Add(delay)) {
		t.Fatalf("the dial was answered %s after SIGTERM, after the %s window: the box is too slow for this test", answered.Sub(sig), delay)
	}
	if resp == nil {
		t.Fatalf("websocket dial after SIGTERM failed without a response: %v; want HTTP 503", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("websocket dial after SIGTERM: HTTP %d (%v); want 503", resp.StatusCode, err)
	}
	if got := resp.Header.Get("Retry-After"); got == "" {
		t.Errorf("the 503 to the upgrade has no Retry-After")
	}
	// Plain requests are still served in the window.
	if r := p.get("/"); r.code != http.StatusOK {
		t.Errorf("GET / during the window = %s; want 200", r)
	}

	if code, _ := p.waitExit(20 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0", code)
	}
}

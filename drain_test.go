package lameduck_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
)

func idleConfig() lameduck.Config {
	return lameduck.Config{DrainMode: lameduck.DrainIdle, ShutdownDelay: 2 * time.Second,
		IdleWindow: 3 * time.Second, DrainTimeout: 20 * time.Second, ShutdownTeardown: 10 * time.Second}
}

// hit runs one application request through the Lifecycle's middleware.
func hit(h http.Handler) {
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api", nil))
}

func TestIdleDrainWaitsOutTheDelayWhenIdle(t *testing.T) {
	h := started(t, idleConfig())
	h.lc.BeginShutdown("test")
	h.timers(1)
	if n := h.clock.Advance(2*time.Second - time.Nanosecond); n != 0 || h.lc.Events().WindowEnded.Fired() {
		t.Fatalf("an idle pod left before the shutdown delay (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	h.waitOK(t)
	if got := windowLength(t, h.lc); got != 2*time.Second {
		t.Fatalf("window %s, want the 2s delay", got)
	}
	h.logged(t, "idle drain done — no application traffic since the start; the shutdown delay has passed", "the log does not say idleness ended the wait")
}

func TestIdleDrainTrafficKeepsItServing(t *testing.T) {
	h := started(t, idleConfig())
	app := lameduck.Wrap(h.lc, okHandler)
	h.lc.BeginShutdown("test")
	// A request every second for 5s: each pushes the end out.
	for range 5 {
		h.timers(1)
		h.clock.Advance(time.Second)
		hit(app)
	}
	// Traffic stops at +5s: the window ends exactly one idle window later.
	h.advanceUntilWindowEnds(250*time.Millisecond, 30*time.Second, nil) // the drain's bound is 20s
	h.waitOK(t)
	if got := windowLength(t, h.lc); got != 8*time.Second {
		t.Fatalf("window %s, want 5s of traffic + the 3s idle window", got)
	}
}

func TestIdleDrainInFlightRequestHoldsIt(t *testing.T) {
	h := started(t, idleConfig())
	entered, release := make(chan struct{}), make(chan struct{})
	app := lameduck.Wrap(h.lc, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { close(entered); <-release }))
	done := make(chan struct{})
	h.lc.BeginShutdown("test")
	h.timers(1)
	h.clock.Advance(time.Second)
	go func() { defer close(done); hit(app) }()
	recv(t, entered, "entered") // arrived at +1s
	h.clock.Advance(time.Second)
	h.timers(1) // busy at +2s: looks again no earlier than +5s
	h.clock.Advance(time.Second)
	close(release) // completes at +3s
	recv(t, done, "the request to complete")
	h.clock.Advance(2 * time.Second) // +5s: idle since +3s, so ends at +6s
	h.timers(1)
	if n := h.clock.Advance(time.Second - time.Nanosecond); n != 0 || h.lc.Events().WindowEnded.Fired() {
		t.Fatalf("ended before the idle window after the completion (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	h.waitOK(t)
	if got := windowLength(t, h.lc); got != 6*time.Second {
		t.Fatalf("window %s, want completion at 3s + idle 3s", got)
	}
}

func TestIdleDrainKeepAliveAndBound(t *testing.T) {
	cfg := idleConfig()
	cfg.DrainTimeout = 6 * time.Second
	h := started(t, cfg)
	h.lc.BeginShutdown("test")
	// A subscription that keeps the pod alive, a message a second.
	h.advanceUntilWindowEnds(time.Second, 30*time.Second, h.lc.KeepAlive)
	h.waitOK(t)
	if got := windowLength(t, h.lc); got != 6*time.Second {
		t.Fatalf("window %s, want the 6s bound", got)
	}
	h.logged(t, "idle drain bound 6s reached (traffic within the last 3s); tearing down", "the log does not say the bound ended the wait")
}

func TestUpgradeAfterTheSignalIsRefused(t *testing.T) {
	h := newHarness(t, lameduck.Config{})
	app := lameduck.Wrap(h.lc, okHandler)
	req := httptest.NewRequest("GET", "/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	rec := httptest.NewRecorder()
	app.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("upgrade while serving: %d", rec.Code)
	}
	h.lc.BeginShutdown("test")
	rec = httptest.NewRecorder()
	app.ServeHTTP(rec, req)
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("upgrade after the signal: %d %v, want 503 with Retry-After", rec.Code, rec.Header())
	}
	rec = httptest.NewRecorder()
	app.ServeHTTP(rec, httptest.NewRequest("GET", "/api", nil))
	if rec.Code != 200 {
		t.Fatalf("a plain request after the signal: %d, want 200 (no 503 injected)", rec.Code)
	}
}

func TestKeepAliveClientsAreHandedOver(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	base := h.serve(okHandler)
	h.start(t)
	c := client(t)
	send := func() (reused bool, connClose bool) {
		t.Helper()
		var info httptrace.GotConnInfo
		req, _ := http.NewRequest("GET", base+"/api", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { info = i }}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("transport error: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return info.Reused, resp.Close
	}
	send()
	if reused, _ := send(); !reused {
		t.Fatal("keep-alive does not work while serving; the test proves nothing")
	}
	h.lc.BeginShutdown("test")
	// The connection idle since before the signal is not closed under the
	// client (a POST on it could not be replayed): its next response tells
	// it to close, and every request after that is on a fresh connection.
	for i := range 5 {
		reused, closing := send()
		if (reused && i > 0) || !closing {
			t.Fatalf("request %d after the signal: reused=%v Connection: close=%v; want a fresh connection told to close", i, reused, closing)
		}
	}
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
}

func TestH2CClientsAreHandedOver(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	h.lc.AddServer(srv, ln)
	h.start(t)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var conns []net.Conn
	send := func() string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/api", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn) }}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("transport error: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if p := send(); p != "HTTP/2.0" {
		t.Fatalf("proto %s: the client did not speak h2c", p)
	}
	send()
	if conns[0] != conns[1] {
		t.Fatal("h2c requests did not share a connection while serving")
	}
	h.lc.BeginShutdown("test")
	send() // answered, then GOAWAY on that connection
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		send()
		if conns[len(conns)-1] != conns[0] {
			break // the client moved to a new connection
		}
	}
	if conns[len(conns)-1] == conns[0] {
		t.Fatal("after the signal the h2c client kept using its connection: no GOAWAY")
	}
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
}

func TestHijackedConnectionIsForceClosedAtTheBudget(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 4 * time.Second, JoinBudget: time.Second})
	hijacked := make(chan struct{})
	base, shutdown := h.serveNotified(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn := upgrade(t, w)
		if conn == nil {
			return
		}
		close(hijacked)
		io.Copy(io.Discard, conn) // never closes on its own; ignores the WindowEnded event
	}))
	h.start(t)
	conn := dialUpgrade(t, base)
	recv(t, hijacked, "hijacked")
	h.endWindow(time.Second)
	h.timers(1) // the HTTP drain's deadline: the whole 4s (no background work)
	// Past the accept grace (a timer of its own for a moment): the deadline
	// is the only timer left, so nothing may fire before 4s.
	recv(t, shutdown, "the drain to call Shutdown")
	if n := h.clock.Advance(4*time.Second - time.Nanosecond); n != 0 || h.lc.Events().HTTPDrained.Fired() {
		t.Fatalf("the drain ended with a hijacked connection open: Shutdown's blind spot (%d timer(s) fired)", n)
	}
	h.clock.Advance(time.Nanosecond)
	if err := h.wait(); err == nil {
		t.Fatal("Run = nil; a cut WebSocket is an overrun")
	}
	if _, err := io.Copy(io.Discard, conn); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("client read: %v", err)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "GET /ws (age 5s, hijacked)") || !strings.Contains(logs, "hijacked_closed=1") {
		t.Fatalf("the forced close is not named and counted:\n%s", logs)
	}
}

func TestStreamsFinishWhenTheWindowEnds(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	streaming := make(chan struct{})
	base := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: hello\n\n")
		w.(http.Flusher).Flush()
		close(streaming)
		<-h.lc.Events().WindowEnded.Done()
		fmt.Fprint(w, "event: bye\ndata: server going away\n\n")
	}))
	h.start(t)
	resp, err := client(t).Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	recv(t, streaming, "streaming")
	h.endWindow(time.Second)
	b, err := io.ReadAll(bufio.NewReader(resp.Body))
	if err != nil {
		t.Fatalf("the stream ended with %v, want a clean end", err)
	}
	if !strings.HasSuffix(string(b), "event: bye\ndata: server going away\n\n") {
		t.Fatalf("stream %q has no final event", b)
	}
	h.waitOK(t)
}

func TestSendRetryAfterDuringTeardown(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true})
	entered, release := make(chan struct{}), make(chan struct{})
	base := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
	}))
	h.start(t)
	c := client(t)
	slow := make(chan int, 1)
	go func() {
		resp, err := c.Get(base + "/slow")
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	recv(t, entered, "entered")
	h.endWindow(time.Second)
	// Teardown has begun and the slow request is in flight: the listener
	// stays open and new requests are told to retry elsewhere.
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		r, err := client(t).Get(base + "/new")
		if err != nil {
			t.Fatalf("a new connection during teardown was refused: %v", err)
		}
		r.Body.Close()
		if r.StatusCode == 503 {
			resp = r
			break
		}
	}
	if resp == nil || resp.Header.Get("Retry-After") != "1" || !resp.Close {
		t.Fatalf("want 503 with Retry-After: 1 and Connection: close, got %+v", resp)
	}
	// Probes are not application requests: answered, not refused.
	get(t, client(t), base+"/healthz").status(t, 200, "ok")
	get(t, client(t), base+"/readyz").status(t, 503, "draining")
	close(release)
	if code := recv(t, slow, "the in-flight request's answer"); code != 200 {
		t.Fatalf("the in-flight request got %d", code)
	}
	h.waitOK(t)
}

// TestNoRequestFailsAtTheSignal is the keep-alive race a hostile review
// found: closing idle connections at the signal (SetKeepAlivesEnabled)
// made POSTs sent in that instant fail with EOF or a reset, since a client
// cannot replay them. Many keep-alive POST clients run across the signal;
// not one request may fail while the window is open.
func TestNoRequestFailsAtTheSignal(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	base := h.serve(okHandler)
	h.start(t)
	stop := make(chan struct{})
	// Failures are counted, and the first few kept: a worker never blocks
	// on reporting one, so however many fail, every worker sees stop.
	var failed atomic.Int64
	var firstMu sync.Mutex
	var first []error
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		c := client(t)
		wg.Go(func() {
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Post(base+"/api", "text/plain", strings.NewReader("x"))
				sent.Add(1)
				if err != nil {
					if failed.Add(1) <= 3 {
						firstMu.Lock()
						first = append(first, err)
						firstMu.Unlock()
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	stopAll := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopAll()
	// until spins until n requests have been sent, or fails after 30s of
	// real time (a hang guard: the clients answer in microseconds).
	until := func(n int64) {
		t.Helper()
		for giveUp := time.Now().Add(30 * time.Second); sent.Load() < n; runtime.Gosched() {
			if time.Now().After(giveUp) {
				t.Fatalf("%d requests sent in 30s; waiting for %d", sent.Load(), n)
			}
		}
	}
	until(500)
	h.lc.BeginShutdown("test")
	until(sent.Load() + 1000)
	stopAll()
	for _, err := range first {
		t.Errorf("a POST failed inside the window: %v", err)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d POSTs failed inside the window", n, sent.Load())
	}
	h.timers(1)
	h.clock.Advance(time.Second)
	h.waitOK(t)
}

func TestTLSConfigIsServedOverTLS(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.EnableHTTP2 = true
	ts.StartTLS() // only for its certificate and a client that trusts it
	cfg := ts.TLS.Clone()
	c := ts.Client()
	ts.Close()
	defer c.CloseIdleConnections()

	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.lc.AddServer(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto, " ", r.TLS != nil)
	}), TLSConfig: cfg}, ln)
	h.start(t)
	resp, err := c.Get("https://" + ln.Addr().String() + "/api")
	if err != nil {
		t.Fatalf("https: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "HTTP/2.0 true" {
		t.Fatalf("got %q, want HTTP/2 over TLS", b)
	}
	h.endWindow(time.Second)
	h.waitOK(t)
}

func TestOneServerOnTwoListeners(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	srv := &http.Server{Handler: okHandler}
	var bases []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h.lc.AddServer(srv, ln)
		bases = append(bases, "http://"+ln.Addr().String())
	}
	h.start(t)
	for range 20 {
		for _, b := range bases {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			if p := get(t, c, b+"/api"); p.code != 200 {
				t.Fatalf("%s: %d", b, p.code)
			}
		}
	}
	if n := len(h.lc.InFlight()); n != 0 {
		t.Fatalf("%d requests still tracked", n)
	}
	// Every connection was closed, so no silent one is left to wait for:
	// Run returns without the accept grace's timer being advanced.
	h.endWindow(time.Second)
	h.waitOK(t)
	if strings.Contains(h.logs.String(), "sent no request") {
		t.Fatalf("a closed connection was counted as silent (a server instrumented twice):\n%s", h.logs)
	}
}

// failingListener fails for good once told to.
type failingListener struct {
	net.Listener
	fail chan struct{}
}

func (l failingListener) Accept() (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Listener.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-l.fail:
		l.Listener.Close()
		return nil, fmt.Errorf("accept: the network went away")
	}
}

func TestServeErrorDuringTheSequenceIsReturned(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := failingListener{ln, make(chan struct{})}
	h.lc.AddServer(&http.Server{Handler: okHandler}, fl)
	h.start(t)
	h.lc.BeginShutdown("test")
	close(fl.fail)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(h.logs.String(), "the network went away"); {
		if time.Now().After(deadline) {
			t.Fatalf("the serve error was not logged when it happened:\n%s", h.logs)
		}
		runtime.Gosched()
	}
	h.timers(1)
	h.clock.Advance(time.Second)
	err = h.wait()
	if err == nil || !strings.Contains(err.Error(), "the network went away") {
		t.Fatalf("Run = %v, want the serve error", err)
	}
	h.logged(t, "the network went away", "the serve error was not logged")
}

func TestSilentConnectionsDoNotHoldTheDrain(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 10 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 1)
	srv := &http.Server{Handler: okHandler, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepted <- struct{}{}
		}
	}}
	if err := h.lc.AddServer(srv, ln); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /api HTTP/1.1\r\nHost: x\r\n") // half a header, then silence
	// The server has the connection before the sequence starts (a dial
	// returns once the kernel has it, before the server's Accept).
	recv(t, accepted, "the server to accept the connection")
	h.endWindow(time.Second)
	h.timers(2) // the HTTP drain's deadline and the accept grace
	h.clock.Advance(250 * time.Millisecond)
	h.waitOK(t)
	if !strings.Contains(h.logs.String(), "closed connection(s) that had sent no request\" silent=1") {
		t.Fatalf("the silent connection is not named:\n%s", h.logs)
	}
	if d := elapsed(t, h.lc.Events().WindowEnded, h.lc.Events().HTTPDrained); d != 250*time.Millisecond {
		t.Fatalf("the drain took %s on the clock, want the 250ms grace", d)
	}
}

// valueConn is a net.Conn whose dynamic type cannot be a map key.
type valueConn struct {
	net.Conn
	tags []string
}

type valueListener struct{ net.Listener }

func (l valueListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return valueConn{Conn: c, tags: []string{"x"}}, nil
}

func TestUnhashableConnectionsAreServed(t *testing.T) {
	h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.lc.AddServer(&http.Server{Handler: okHandler}, valueListener{ln})
	h.start(t)
	if p := get(t, client(t), "http://"+ln.Addr().String()+"/api"); p.code != 200 {
		t.Fatalf("%d", p.code)
	}
	h.endWindow(time.Second)
	h.waitOK(t)
}

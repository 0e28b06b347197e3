package ldconnect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/lameduck/lameduck"
	ldconnect "github.com/lameduck/lameduck/contrib/connect"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The test service, written on protobuf's well-known types so it needs no
// generated code:
//
//	Slow(StringValue) returns (StringValue)                 unary: waits for release, ignoring its context
//	Stream(StringValue) returns (stream StringValue)        "finite": one message, then one more at streamRelease;
//	                                                        "forever": a message every 10ms until its context ends
//	Count(stream StringValue) returns (StringValue)         client stream: the number of messages, at the client's end
//	Echo(stream StringValue) returns (stream StringValue)   bidirectional: each message back, until the client's end
const (
	procSlow   = "/test.v1.Test/Slow"
	procStream = "/test.v1.Test/Stream"
	procCount  = "/test.v1.Test/Count"
	procEcho   = "/test.v1.Test/Echo"
)

type str = wrapperspb.StringValue

type service struct {
	release       chan struct{}
	streamRelease chan struct{}
}

func (s *service) mux(opts []connect.HandlerOption) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(procSlow, connect.NewUnaryHandler(procSlow, func(ctx context.Context, r *connect.Request[str]) (*connect.Response[str], error) {
		if r.Msg.GetValue() == "wait" {
			<-s.release
		}
		return connect.NewResponse(wrapperspb.String("done")), nil
	}, opts...))
	mux.Handle(procStream, connect.NewServerStreamHandler(procStream, func(ctx context.Context, r *connect.Request[str], st *connect.ServerStream[str]) error {
		if r.Msg.GetValue() == "finite" {
			if err := st.Send(wrapperspb.String("first")); err != nil {
				return err
			}
			<-s.streamRelease
			return st.Send(wrapperspb.String("last"))
		}
		for {
			if err := st.Send(wrapperspb.String("tick")); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}, opts...))
	mux.Handle(procCount, connect.NewClientStreamHandler(procCount, func(ctx context.Context, st *connect.ClientStream[str]) (*connect.Response[str], error) {
		n := 0
		for st.Receive() {
			n++
		}
		if err := st.Err(); err != nil {
			return nil, err
		}
		return connect.NewResponse(wrapperspb.String(fmt.Sprint(n))), nil
	}, opts...))
	mux.Handle(procEcho, connect.NewBidiStreamHandler(procEcho, func(ctx context.Context, st *connect.BidiStream[str, str]) error {
		for {
			m, err := st.Receive()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	}, opts...))
	return mux
}

// served is a Lifecycle serving the test service, and its address.
type served struct {
	lc   *lameduck.Lifecycle
	srv  *ldconnect.Server
	svc  *service
	url  string
	wait func() error
	// release ends the Slow calls that wait, streamRelease the finite
	// streams; each is safe to call twice.
	release, streamRelease func()
}

// serve registers the test service on lc (built by the caller) on a free
// port of 127.0.0.1; the caller starts lc.
func serve(t *testing.T, lc *lameduck.Lifecycle) *served {
	t.Helper()
	s := &served{lc: lc, srv: ldconnect.New(lc),
		svc: &service{release: make(chan struct{}), streamRelease: make(chan struct{})}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.srv.AddServer(&http.Server{Handler: s.svc.mux(s.srv.HandlerOptions()), ReadHeaderTimeout: 10 * time.Second}, ln); err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String()
	s.release, s.streamRelease = sync.OnceFunc(func() { close(s.svc.release) }), sync.OnceFunc(func() { close(s.svc.streamRelease) })
	t.Cleanup(s.release)
	t.Cleanup(s.streamRelease)
	return s
}

// A client: a protocol over a transport, with Connect's own Go client.
type client struct {
	name string
	http *http.Client
	opts []connect.ClientOption
	h2   bool // cleartext HTTP/2 (h2c, prior knowledge); HTTP/1.1 otherwise
}

func newClient(t *testing.T, protocol string, h2 bool) client {
	t.Helper()
	p := new(http.Protocols)
	if h2 {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	c := client{name: protocol, http: &http.Client{Transport: tr}, h2: h2}
	switch protocol {
	case "grpc":
		c.opts = []connect.ClientOption{connect.WithGRPC()}
	case "grpcweb":
		c.opts = []connect.ClientOption{connect.WithGRPCWeb()}
	}
	if h2 {
		c.name += "/h2c"
	} else {
		c.name += "/http1.1"
	}
	return c
}

// clients are every protocol over every transport it runs on: gRPC needs
// HTTP/2.
func clients(t *testing.T) []client {
	return []client{
		newClient(t, "connect", false), newClient(t, "connect", true),
		newClient(t, "grpc", true),
		newClient(t, "grpcweb", false), newClient(t, "grpcweb", true),
	}
}

func unary(c client, url string) *connect.Client[str, str] {
	return connect.NewClient[str, str](c.http, url+procSlow, c.opts...)
}

func streamClient(c client, url, proc string) *connect.Client[str, str] {
	return connect.NewClient[str, str](c.http, url+proc, c.opts...)
}

func testLogger(t *testing.T, logs io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))
}

// inFlight waits until lc counts n requests in flight.
func inFlight(t *testing.T, lc *lameduck.Lifecycle, n int) {
	t.Helper()
	deadline := time.Now().Add(testsupport.Guard)
	for len(lc.InFlight()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight, want %d: %v", len(lc.InFlight()), n, lc.InFlight())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SIGTERM with calls of every kind in flight, on the Connect, gRPC and
// gRPC-Web protocols over HTTP/1.1 and h2c: unary calls and client streams
// that outlive the window are drained in the teardown, server and
// bidirectional streams that end within the window finish, calls made in
// the window are served and move the client to a fresh connection (GOAWAY
// on HTTP/2, Connection: close on HTTP/1.1), and the streams that never end
// are ended at the window's end with Unavailable. Not one call fails; the
// drain is clean.
//
// The Lifecycle runs on the fake clock, so the window lasts until the test
// ends it, however long the calls in it take on a loaded machine.
func TestDrainEveryProtocol(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, clk := testsupport.NewLifecycle(t, lameduck.Config{ShutdownDelay: 5 * time.Second, ShutdownTeardown: 10 * time.Second,
		Logger: testLogger(t, logs)})
	s := serve(t, lc)
	s.wait = lameducktest.Start(t, lc)
	// The calls' contexts are hang guards: a call the drain never ends
	// fails when they end.
	ctx := testsupport.Context(t, 30*time.Second)

	type result struct {
		what string
		err  error
	}
	results := make(chan result, 100)
	var failed atomic.Int64
	bad := func(format string, args ...any) {
		t.Helper()
		failed.Add(1)
		t.Errorf(format, args...)
	}
	var started, forever int
	var clientStreams []*connect.ClientStreamForClient[str, str]
	var finite, ticks []*connect.ServerStreamForClient[str]
	var bidis []*connect.BidiStreamForClient[str, str]
	cs := clients(t)
	for _, c := range cs {
		go func() {
			res, err := unary(c, s.url).CallUnary(ctx, connect.NewRequest(wrapperspb.String("wait")))
			if err == nil && res.Msg.GetValue() != "done" {
				err = fmt.Errorf("answer %q", res.Msg.GetValue())
			}
			results <- result{c.name + " unary", err}
		}()
		started++
		st, err := streamClient(c, s.url, procStream).CallServerStream(ctx, connect.NewRequest(wrapperspb.String("finite")))
		if err != nil || !st.Receive() {
			t.Fatalf("%s: the finite stream: %v %v", c.name, err, st.Err())
		}
		finite = append(finite, st)
		started++
		tk, err := streamClient(c, s.url, procStream).CallServerStream(ctx, connect.NewRequest(wrapperspb.String("forever")))
		if err != nil || !tk.Receive() {
			t.Fatalf("%s: the endless stream: %v %v", c.name, err, tk.Err())
		}
		ticks = append(ticks, tk)
		forever++
		cst := streamClient(c, s.url, procCount).CallClientStream(ctx)
		if err := cst.Send(wrapperspb.String("one")); err != nil {
			t.Fatalf("%s: the client stream: %v", c.name, err)
		}
		clientStreams = append(clientStreams, cst)
		started++
		if c.h2 { // bidirectional streams need HTTP/2
			b := streamClient(c, s.url, procEcho).CallBidiStream(ctx)
			if err := b.Send(wrapperspb.String("ping")); err != nil {
				t.Fatalf("%s: the bidi stream: %v", c.name, err)
			}
			if _, err := b.Receive(); err != nil {
				t.Fatalf("%s: the bidi stream: %v", c.name, err)
			}
			bidis = append(bidis, b)
			started++
		}
	}
	inFlight(t, lc, started+forever)
	t.Logf("calls in flight at the signal: %d that end (unary, client streams, finite and bidirectional streams), %d endless streams", started, forever)
	lc.BeginShutdown("SIGTERM")

	// Readiness is NOT_SERVING at once, liveness SERVING, on every protocol.
	for _, c := range cs {
		hc := grpchealth.NewClient(c.http, s.url, c.opts...)
		for svc, want := range map[string]grpchealth.Status{"": grpchealth.StatusNotServing, ldconnect.ServiceReadiness: grpchealth.StatusNotServing,
			ldconnect.ServiceLiveness: grpchealth.StatusServing} {
			res, err := hc.Check(ctx, &grpchealth.CheckRequest{Service: svc})
			if err != nil || res.Status != want {
				t.Errorf("%s: draining: Check(%q) = %v, %v; want %v", c.name, svc, res, err, want)
			}
		}
	}

	// The window: a new call is served, on a connection told to close; the
	// next one opens a fresh connection.
	for _, c := range cs {
		var reused []bool
		for range 2 {
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
			res, err := unary(c, s.url).CallUnary(httptrace.WithClientTrace(ctx, trace), connect.NewRequest(wrapperspb.String("now")))
			if err != nil || res.Msg.GetValue() != "done" {
				bad("%s: a call in the window: %v", c.name, err)
			}
		}
		if len(reused) != 2 || reused[1] {
			bad("%s: connections reused by the two calls made in the window: %v; want the second on a fresh connection", c.name, reused)
		}
	}
	// Streams that end within the window finish.
	s.streamRelease()
	for i, st := range finite {
		var msgs []string
		for st.Receive() {
			msgs = append(msgs, st.Msg().GetValue())
		}
		if err := st.Err(); err != nil || strings.Join(msgs, ",") != "last" {
			bad("%s: the finite stream: %q, %v; want \"last\" and no error", cs[i].name, msgs, err)
		}
		st.Close()
	}
	for _, b := range bidis {
		if err := b.Send(wrapperspb.String("pong")); err != nil {
			bad("bidi stream in the window: %v", err)
		}
		m, err := b.Receive()
		if err != nil || m.GetValue() != "pong" {
			bad("bidi stream in the window: %v %v", m, err)
		}
		b.CloseRequest()
		if _, err := b.Receive(); !errors.Is(err, io.EOF) {
			bad("bidi stream's end: %v, want EOF", err)
		}
		b.CloseResponse()
	}

	// The window's end: endless streams end with Unavailable.
	lameducktest.EndWindow(t, lc, clk)
	for i, tk := range ticks {
		for tk.Receive() {
		}
		if code := connect.CodeOf(tk.Err()); code != connect.CodeUnavailable {
			bad("%s: the endless stream ended with %v, want Unavailable", cs[i].name, tk.Err())
		}
		tk.Close()
	}

	// The teardown: the unary calls and client streams still in flight are
	// waited for.
	s.release()
	for i, cst := range clientStreams {
		if err := cst.Send(wrapperspb.String("two")); err != nil {
			bad("%s: the client stream in the teardown: %v", cs[i].name, err)
		}
		res, err := cst.CloseAndReceive()
		if err != nil || res.Msg.GetValue() != "2" {
			bad("%s: the client stream: %v, %v; want 2 messages counted", cs[i].name, res, err)
		}
	}
	for range cs {
		r := testsupport.Recv(t, results, "a unary call's answer")
		if r.err != nil {
			bad("%s: %v", r.what, r.err)
		}
	}
	if err := s.wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls in flight at the signal (beside %d endless streams), %d failed", started, forever, failed.Load())
	if !strings.Contains(logs.String(), "every in-flight request finished") {
		t.Fatalf("the drain was not clean:\n%s", logs)
	}
}

func check(t testing.TB, hc *grpchealth.Client, service string) (grpchealth.Status, error) {
	t.Helper()
	res, err := hc.Check(testsupport.Context(t, 10*time.Second), &grpchealth.CheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return res.Status, nil
}

func wantStatus(t testing.TB, cs []client, url, when string, want map[string]grpchealth.Status) {
	t.Helper()
	for _, c := range cs {
		hc := grpchealth.NewClient(c.http, url, c.opts...)
		for svc, st := range want {
			if got, err := check(t, hc, svc); err != nil || got != st {
				t.Errorf("%s: %s: Check(%q) = %v, %v; want %v", c.name, when, svc, got, err, st)
			}
		}
	}
}

const (
	serving    = grpchealth.StatusServing
	notServing = grpchealth.StatusNotServing
	pingSvc    = "test.v1.Test"
)

// The health service through the phases (testsupport.HealthThroughThePhases),
// asked on every protocol: starting, serving, a critical check failing,
// SetServing, an unknown service, the signal, and a Watch stream (gRPC over
// h2c) told of each change and ended at the window's end.
//
// The Lifecycle runs on the fake clock, so the window lasts until the test
// ends it; the Watch's re-read keeps its real timer.
func TestHealthThroughThePhases(t *testing.T) {
	testsupport.HealthThroughThePhases(t, func(lc *lameduck.Lifecycle, _ *testsupport.LogBuffer) testsupport.Health[grpchealth.Status] {
		s := serve(t, lc)
		cs := clients(t)
		s.srv.Health().SetServing(pingSvc, true)
		hc := grpchealth.NewClient(cs[2].http, s.url, cs[2].opts...) // gRPC over h2c
		return testsupport.Health[grpchealth.Status]{
			Serving: serving, NotServing: notServing, Service: pingSvc,
			Want: func(t testing.TB, when string, want map[string]grpchealth.Status) {
				wantStatus(t, cs, s.url, when, want)
			},
			Check: func(t testing.TB, service string) error {
				_, err := check(t, hc, service)
				return err
			},
			Watch: func(t testing.TB) func() (grpchealth.Status, error) {
				watch := hc.Watch(testsupport.Context(t, 30*time.Second), &grpchealth.CheckRequest{Service: ""})
				return func() (grpchealth.Status, error) {
					ev := testsupport.Recv(t, watch, "a Watch update")
					if ev.Response == nil { // the stream's end
						return 0, ev.Err
					}
					return ev.Response.Status, nil
				}
			},
			Code:       func(err error) uint32 { return uint32(connect.CodeOf(err)) },
			SetServing: s.srv.Health().SetServing,
		}
	})
}

// A call that outlives the teardown budget is cut and named in the log, by
// its procedure, and Run says so.
func TestCutAtTheBudget(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, err := lameduck.New(lameduck.Config{ShutdownDelay: lameduck.NoDelay, ShutdownTeardown: time.Second, IgnoreSignals: true,
		LookupEnv: func(string) (string, bool) { return "", false }, Logger: testLogger(t, logs)})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, lc)
	s.wait = lameducktest.Start(t, lc)
	c := newClient(t, "grpc", true)
	call := make(chan error, 1)
	go func() {
		_, err := unary(c, s.url).CallUnary(testsupport.Context(t, 30*time.Second), connect.NewRequest(wrapperspb.String("wait")))
		call <- err
	}()
	inFlight(t, lc, 1)
	lc.BeginShutdown("SIGTERM")
	err = s.wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if err := testsupport.Recv(t, call, "the cut call's end"); err == nil {
		t.Error("the cut call succeeded")
	}
	if !strings.Contains(logs.String(), "POST "+procSlow) {
		t.Fatalf("the cut call is not named in the log:\n%s", logs)
	}
	s.release() // the handler ignores its context: let it return
}

func TestAddServerRefusesNil(t *testing.T) {
	lc, _ := testsupport.NewLifecycle(t, lameduck.Config{})
	err := ldconnect.New(lc).AddServer(nil, nil)
	if err == nil || !strings.Contains(err.Error(), "*http.Server is nil") {
		t.Fatalf("AddServer(nil): %v", err)
	}
}

// In reject mode (Config.SendRetryAfter, in the teardown while a call is
// still in flight) a new call is refused with Unavailable in its own
// protocol and Retry-After: 1, while the health service still answers.
func TestRejectModeRefusesInTheProtocol(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, clk := testsupport.NewLifecycle(t, lameduck.Config{ShutdownDelay: 5 * time.Second, ShutdownTeardown: 10 * time.Second,
		SendRetryAfter: true, Logger: testLogger(t, logs)})
	srv := ldconnect.New(lc)
	svc := &service{release: make(chan struct{}), streamRelease: make(chan struct{})}
	hs := &http.Server{Handler: svc.mux(srv.HandlerOptions()), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddServer(hs, ln); err != nil {
		t.Fatal(err)
	}
	wait := lameducktest.Start(t, lc)
	release := sync.OnceFunc(func() { close(svc.release) })
	defer release()
	c := newClient(t, "connect", true)
	held := make(chan error, 1)
	go func() {
		_, err := unary(c, "http://"+ln.Addr().String()).CallUnary(testsupport.Context(t, 30*time.Second), connect.NewRequest(wrapperspb.String("wait")))
		held <- err
	}()
	inFlight(t, lc, 1)
	lameducktest.EndWindow(t, lc, clk)
	// The teardown turns reject mode on as it begins, just after the
	// window's end.
	for deadline := time.Now().Add(testsupport.Guard); ; time.Sleep(5 * time.Millisecond) {
		rec := newRecorder()
		hs.Handler.ServeHTTP(rec, httptestRequest(t, procSlow, "application/json", `"now"`))
		if rec.code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reject mode in the teardown: %d %s", rec.code, rec.body.String())
		}
	}

	// The server's handler, called as net/http calls it: a new call.
	for _, tc := range []struct{ name, path, ctype, body string }{
		{"connect", procSlow, "application/json", `"now"`},
		{"grpc", procSlow, "application/grpc", "\x00\x00\x00\x00\x00"},
	} {
		req := httptestRequest(t, tc.path, tc.ctype, tc.body)
		rec := newRecorder()
		hs.Handler.ServeHTTP(rec, req)
		if rec.hdr.Get("Retry-After") != lameduck.RetryAfterSeconds {
			t.Errorf("%s: refused without Retry-After: %v", tc.name, rec.hdr)
		}
		switch tc.name {
		case "connect":
			if rec.code != http.StatusServiceUnavailable || !strings.Contains(rec.body.String(), `"code":"unavailable"`) {
				t.Errorf("connect: %d %s, want 503 and a Connect error with code unavailable", rec.code, rec.body.String())
			}
		case "grpc":
			if got := rec.hdr.Get("Grpc-Status"); got != "14" { // codes.Unavailable
				t.Errorf("grpc: grpc-status %q (headers %v), want 14 (Unavailable)", got, rec.hdr)
			}
		}
	}
	// The health service still answers.
	req := httptestRequest(t, "/grpc.health.v1.Health/Check", "application/json", `{"service":"liveness"}`)
	rec := newRecorder()
	hs.Handler.ServeHTTP(rec, req)
	if rec.code != http.StatusOK || !strings.Contains(rec.body.String(), "SERVING_STATUS_SERVING") {
		t.Errorf("health in reject mode: %d %s, want 200 SERVING", rec.code, rec.body.String())
	}
	release()
	if err := testsupport.Recv(t, held, "the held call's answer"); err != nil {
		t.Errorf("the call in flight: %v", err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func httptestRequest(t *testing.T, path, ctype, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://example"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	if strings.HasPrefix(ctype, "application/grpc") {
		req.ProtoMajor, req.ProtoMinor, req.Proto = 2, 0, "HTTP/2.0"
		req.Header.Set("Te", "trailers")
	}
	return req
}

// recorder is an http.ResponseWriter that keeps what it is given, trailers
// folded into the headers as net/http sends them after the body.
type recorder struct {
	hdr  http.Header
	code int
	body strings.Builder
}

func newRecorder() *recorder { return &recorder{hdr: http.Header{}} }

func (r *recorder) Header() http.Header { return r.hdr }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Flush() {}

// The health calls are probes: a Watch open and Checks made in the window
// are not in flight and do not hold the idle drain, whose window ends at
// its minimum; the Watch still ends at the window's end.
func TestHealthCallsAreNotApplicationTraffic(t *testing.T) {
	logs := &testsupport.LogBuffer{}
	lc, clk := testsupport.NewLifecycle(t, lameduck.Config{DrainMode: lameduck.DrainIdle, ShutdownDelay: time.Second,
		IdleWindow: 2 * time.Second, DrainTimeout: 20 * time.Second, ShutdownTeardown: 5 * time.Second,
		Logger: testLogger(t, logs)})
	s := serve(t, lc)
	s.wait = lameducktest.Start(t, lc)
	cs := clients(t)
	hc := grpchealth.NewClient(cs[2].http, s.url, cs[2].opts...) // gRPC over h2c
	watch := hc.Watch(testsupport.Context(t, 30*time.Second), &grpchealth.CheckRequest{Service: ldconnect.ServiceReadiness})
	if ev := testsupport.Recv(t, watch, "the Watch's first answer"); ev.Err != nil || ev.Response.Status != serving {
		t.Fatalf("the Watch's first answer: %+v", ev)
	}
	wantStatus(t, cs, s.url, "serving", map[string]grpchealth.Status{ldconnect.ServiceLiveness: serving, "": serving})
	inFlight(t, lc, 0)
	// Off the clock's first instant, which the idle drain could not tell
	// from no traffic at all: a Check counted as traffic would show.
	clk.Advance(100 * time.Millisecond)
	lc.BeginShutdown("SIGTERM")
	if ev := testsupport.Recv(t, watch, "the Watch at the signal"); ev.Err != nil || ev.Response.Status != notServing {
		t.Fatalf("the Watch at the signal: %+v", ev)
	}
	wantStatus(t, cs, s.url, "in the window", map[string]grpchealth.Status{ldconnect.ServiceLiveness: serving, "": notServing})
	testsupport.Timers(t, clk, 1) // the window's
	clk.Advance(time.Second)
	testsupport.Await(t, lc.Events().WindowEnded)
	if a, _ := lc.Events().ShutdownInitiated.At(); !a.Add(time.Second).Equal(clk.Now()) {
		t.Fatalf("the window did not end at its 1s minimum")
	}
	for ev := range watch {
		if ev.Err != nil {
			if connect.CodeOf(ev.Err) != connect.CodeUnavailable {
				t.Fatalf("the Watch ended with %v at the window's end, want Unavailable", ev.Err)
			}
			break
		}
	}
	if err := s.wait(); err != nil {
		t.Fatal(err)
	}
}

package ldfasthttp_test

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldfasthttp "github.com/lameduck/lameduck/contrib/fasthttp"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"github.com/valyala/fasthttp"
)

// newFastRig returns a started testsupport.HTTPRig whose server under test
// is a fasthttp server registered with AddServer, its handler app(lc)
// wrapped by the middleware, with ReadTimeout and IdleTimeout left at 0.
func newFastRig(t *testing.T, cfg lameduck.Config, app func(lc *lameduck.Lifecycle) fasthttp.RequestHandler) *testsupport.HTTPRig {
	t.Helper()
	r := testsupport.NewHTTPRig(t, cfg)
	ln, base := testsupport.Listen(t)
	srv := &fasthttp.Server{Handler: ldfasthttp.New(r.LC).Handler(app(r.LC))}
	if err := ldfasthttp.AddServer(r.LC, srv, "", ln); err != nil {
		t.Fatal(err)
	}
	r.Base = base
	r.Start(t)
	return r
}

// A keep-alive connection idle since before the signal, and one whose
// request straddles it, with ReadTimeout and IdleTimeout at 0: neither
// holds the exit. The straddling request's answer says Connection: close
// (its connection closes instead of going idle), the idle one is closed by
// fasthttp's shutdown once the requests are done, and the log counts it.
// Run returns nil without the teardown budget being advanced.
func TestIdleKeepAliveConnectionsNeverHoldTheExit(t *testing.T) {
	slowIn := make(chan struct{})
	r := newFastRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 30 * time.Second},
		func(lc *lameduck.Lifecycle) fasthttp.RequestHandler {
			return func(fc *fasthttp.RequestCtx) {
				if string(fc.Path()) == "/slow" {
					close(slowIn)
					<-lc.Events().WindowEnded.Done()
				}
				fc.SetBodyString("hello")
			}
		})
	idle := testsupport.Client(t)
	if a := testsupport.Do(t, idle, "GET", r.Base+"/", nil); a.Code != 200 || a.Close {
		t.Fatalf("before the signal: %d close=%v; want 200, kept alive", a.Code, a.Close)
	}
	slow := testsupport.GoFetch(testsupport.Client(t), "GET", r.Base+"/slow")
	testsupport.Recv(t, slowIn, "the /slow handler")
	lameducktest.EndWindow(t, r.LC, r.Clk)
	a := testsupport.Recv(t, slow, "the straddling request's answer").OK(t)
	if a.Code != 200 || !a.Close {
		t.Fatalf("the request that straddled the signal: %d close=%v; want 200 with Connection: close", a.Code, a.Close)
	}
	if err := r.Wait(); err != nil {
		t.Fatalf("Run = %v; want nil, no budget spent", err)
	}
	if !strings.Contains(r.Logs.String(), `msg="lameduck: server fasthttp: closed 1 idle keep-alive connection(s)" server=fasthttp idle_closed=1`) {
		t.Fatalf("the log does not count the idle connection closed:\n%s", r.Logs)
	}
	if strings.Contains(r.Logs.String(), "at the teardown budget") {
		t.Fatalf("a connection was closed at the budget:\n%s", r.Logs)
	}
}

// RequestCtx.Done() stays open through the teardown while the request runs,
// and closes at the teardown budget, which then cuts the request.
func TestRequestCtxDoneClosesAtTheBudget(t *testing.T) {
	in, out := make(chan struct{}), make(chan struct{})
	r := newFastRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 4 * time.Second},
		func(lc *lameduck.Lifecycle) fasthttp.RequestHandler {
			return func(fc *fasthttp.RequestCtx) {
				close(in)
				<-fc.Done()
				close(out)
			}
		})
	held := testsupport.GoFetch(testsupport.Client(t), "GET", r.Base+"/held")
	testsupport.Recv(t, in, "the handler")
	lameducktest.EndWindow(t, r.LC, r.Clk)
	testsupport.Timers(t, r.Clk, 1) // the teardown's budget
	select {
	case <-out:
		t.Fatal("RequestCtx.Done() closed when the teardown began, with its budget untouched")
	default:
	}
	r.Clk.Advance(4 * time.Second)
	testsupport.Recv(t, out, "RequestCtx.Done() at the budget")
	if err := r.Wait(); err == nil {
		t.Fatal("Run = nil; want the held request cut at the budget")
	}
	_ = testsupport.Recv(t, held, "the held request's end")
	if !strings.Contains(r.Logs.String(), "GET /held") {
		t.Fatalf("the cut request is not named:\n%s", r.Logs)
	}
}

// Stream counts the streamed body in flight, under the request's method and
// path, until its writer returns: the teardown waits for it, and the
// stream ends with its final event when the window ends.
func TestStreamIsTracked(t *testing.T) {
	r := newFastRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 5 * time.Second},
		func(lc *lameduck.Lifecycle) fasthttp.RequestHandler {
			return func(fc *fasthttp.RequestCtx) {
				fc.SetContentType("text/event-stream")
				ldfasthttp.Stream(lc, fc, func(w *bufio.Writer) {
					w.WriteString("data: hello\n\n")
					if w.Flush() != nil {
						return
					}
					<-lc.Events().WindowEnded.Done()
					w.WriteString("event: bye\n\n")
				})
			}
		})
	testsupport.StreamIsTracked(t, r)
}

// A stream still writing at the budget is cut and named like a request.
func TestStreamCutAtTheBudgetIsNamed(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := newFastRig(t, lameduck.Config{ShutdownDelay: time.Second, ShutdownTeardown: 3 * time.Second},
		func(lc *lameduck.Lifecycle) fasthttp.RequestHandler {
			return func(fc *fasthttp.RequestCtx) {
				ldfasthttp.Stream(lc, fc, func(w *bufio.Writer) {
					w.WriteString("data: hello\n\n")
					if w.Flush() != nil {
						return
					}
					<-release
				})
			}
		})
	resp, err := testsupport.Client(t).Post(r.Base+"/feed", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, _ := bufio.NewReader(resp.Body).ReadString('\n'); line != "data: hello\n" {
		t.Fatalf("first line %q", line)
	}
	lameducktest.EndWindow(t, r.LC, r.Clk)
	testsupport.Timers(t, r.Clk, 1)
	r.Clk.Advance(3 * time.Second)
	if err := r.Wait(); err == nil {
		t.Fatal("Run = nil; want the stream cut")
	}
	if !strings.Contains(r.Logs.String(), "cut 1 in-flight request(s) after 3s: POST /feed") {
		t.Fatalf("the cut stream is not named:\n%s", r.Logs)
	}
}

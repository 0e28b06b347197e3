package testsupport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/lameducktest"
)

// HTTPRig is what the tests of an HTTP framework's integration (contrib/fiber,
// contrib/fiberv3, contrib/fasthttp) share: a Lifecycle on lameducktest's
// fake clock logging to Logs, and the URL of the framework's server under
// test, which the caller registers on LC and names in Base. The scenarios
// below drive it through real HTTP requests on loopback; each states the
// routes it needs.
type HTTPRig struct {
	LC   *lameduck.Lifecycle
	Clk  *lameducktest.Clock
	Logs *LogBuffer
	// Base is the framework server's URL ("http://127.0.0.1:port"), set by
	// the caller once it has registered the server.
	Base string
	wait func() error
}

// NewHTTPRig returns a rig whose Lifecycle is made from cfg with its Logger
// replaced by a text handler writing to Logs, and a zero CheckTimeout
// replaced by Timeout (checks that answer at once still answer "ok" or
// "error", not "timeout", when a loaded machine delays a ping past 1s).
// When t fails, its cleanup logs what the Lifecycle logged.
func NewHTTPRig(t testing.TB, cfg lameduck.Config) *HTTPRig {
	t.Helper()
	r := &HTTPRig{Logs: &LogBuffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(r.Logs, nil))
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = Timeout
	}
	r.LC, r.Clk = NewLifecycle(t, cfg)
	r.Logs.LogOnFailure(t)
	return r
}

// Listen returns a listener on a free port of 127.0.0.1 and its URL
// ("http://127.0.0.1:port"); it fails t when it cannot listen.
func Listen(t testing.TB) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, "http://" + ln.Addr().String()
}

// AddNetHTTP registers a net/http server (every route 404) on the rig's
// Lifecycle, on a listener of its own, and returns its URL: the probes'
// reference answers. It fails t when the Lifecycle refuses it.
func (r *HTTPRig) AddNetHTTP(t testing.TB) string {
	t.Helper()
	ln, base := Listen(t)
	if err := r.LC.AddServer(&http.Server{Handler: http.NotFoundHandler()}, ln); err != nil {
		t.Fatal(err)
	}
	return base
}

// Start runs the Lifecycle (lameducktest.Start); Wait then returns Run's
// result.
func (r *HTTPRig) Start(t testing.TB) { r.wait = lameducktest.Start(t, r.LC) }

// Wait waits for Run, started by Start, to return, and returns its error.
func (r *HTTPRig) Wait() error { return r.wait() }

// Client returns an HTTP client with a transport of its own, whose idle
// connections t's cleanup closes, and a 10s timeout (a hang guard).
func Client(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// ProbeQuestion is one request CompareProbes asks of both servers.
type ProbeQuestion struct {
	Method, Path string
	Header       map[string]string // nil for none
}

// ProbeQuestions are the requests a framework's probes must answer exactly
// as net/http's do: every probe, method and query the probe handler tells
// apart, and the percent-encoded paths net/http decodes before routing.
var ProbeQuestions = []ProbeQuestion{
	{"GET", "/healthz", nil}, {"HEAD", "/healthz", nil}, {"POST", "/healthz", nil},
	{"GET", "/startupz", nil}, {"GET", "/readyz", nil}, {"HEAD", "/readyz", nil}, {"DELETE", "/readyz", nil},
	{"GET", "/readyz?verbose", nil}, {"GET", "/readyz?verbose=1&exclude=cache", nil},
	{"GET", "/readyz?exclude=nope", nil}, {"GET", "/readyz/db", nil}, {"GET", "/readyz/cache", nil},
	{"GET", "/readyz/nope", nil}, {"GET", "/readyz/nope?verbose", nil},
	{"GET", "/readyz", map[string]string{"Accept": "application/health+json"}},
	{"HEAD", "/prestop", nil},
	// The path is the one net/http's Request.URL.Path holds: decoded.
	{"GET", "/readyz%2Fdb", nil}, {"GET", "/readyz%2Fcache?verbose", nil}, {"GET", "/%72eadyz", nil},
}

// stamps are the only bytes allowed to differ between two probe answers
// taken a moment apart: a check result's observation time.
var stamps = regexp.MustCompile(`"time":"[^"]*"`)

// CompareProbes asks each of qs of the framework's server at base and of the
// net/http server at netHTTP through c, and reports with t.Errorf every
// difference in status code, body (but for the checks' "time" stamps) and
// headers (but for Date and the headers named in ignore, such as a
// framework's own Server header), in either direction, naming the
// framework and the phase.
func CompareProbes(t testing.TB, c *http.Client, framework, phase, base, netHTTP string, qs []ProbeQuestion, ignore ...string) {
	t.Helper()
	for _, x := range qs {
		f := Do(t, c, x.Method, base+x.Path, x.Header)
		h := Do(t, c, x.Method, netHTTP+x.Path, x.Header)
		what := phase + ": " + x.Method + " " + x.Path
		if f.Code != h.Code {
			t.Errorf("%s: %s %d, net/http %d", what, framework, f.Code, h.Code)
		}
		if fb, hb := stamps.ReplaceAllString(f.Body, `"time":"T"`), stamps.ReplaceAllString(h.Body, `"time":"T"`); fb != hb {
			t.Errorf("%s: bodies differ:\n%s: %q\nnet/http: %q", what, framework, f.Body, h.Body)
		}
		for _, hdr := range [][]http.Header{{f.Header, h.Header}, {h.Header, f.Header}} {
			for k, v := range hdr[0] {
				if k == "Date" || slices.Contains(ignore, k) {
					continue
				}
				if !slices.Equal(v, hdr[1][k]) {
					t.Errorf("%s: header %s: %s %q, net/http %q", what, k, framework, f.Header[k], h.Header[k])
				}
			}
		}
	}
}

// ProbesKeepIdleDrainShort holds that probes are not application requests
// in an idle drain (docs/probes-and-shutdown.md): r's Lifecycle, started,
// with DrainMode idle, ShutdownDelay 1s and an IdleWindow longer than that,
// is signalled and asked every probe at r.Base; nothing is in flight after
// them, the window ends at its 1s minimum, and Run returns nil.
func ProbesKeepIdleDrainShort(t testing.TB, r *HTTPRig) {
	t.Helper()
	// Off the clock's first instant, which the idle drain could not
	// tell from no traffic at all.
	r.Clk.Advance(100 * time.Millisecond)
	r.LC.BeginShutdown("test")
	c := Client(t)
	for _, p := range []string{"/healthz", "/readyz", "/startupz"} {
		Do(t, c, "GET", r.Base+p, nil)
	}
	if got := r.LC.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight() after probes = %v", got)
	}
	Timers(t, r.Clk, 1) // the window's
	r.Clk.Advance(time.Second)
	Await(t, r.LC.Events().WindowEnded)
	if a, _ := r.LC.Events().ShutdownInitiated.At(); !a.Add(time.Second).Equal(r.Clk.Now()) {
		t.Fatal("probes held the idle drain past its 1s minimum")
	}
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
}

// RejectMode drives r's started Lifecycle (reject mode, SendRetryAfter)
// through a drain with a request in flight: GET /slow must close entered
// and answer 200 once release is closed; GET /new is any other request.
// Once the window has ended, new requests are refused 503; the refusal is
// returned for the caller's own checks, after /healthz answered 200 ok and
// /readyz 503 draining. Then release is closed, the in-flight request is
// answered 200, and Run returns nil.
func RejectMode(t testing.TB, r *HTTPRig, entered, release chan struct{}) Reply {
	t.Helper()
	slow := GoFetch(Client(t), "GET", r.Base+"/slow")
	Recv(t, entered, "the /slow handler")
	lameducktest.EndWindow(t, r.LC, r.Clk)
	var a Reply
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && a.Code != 503; {
		a = Do(t, Client(t), "GET", r.Base+"/new", nil)
	}
	if a.Code != 503 {
		t.Fatalf("no refusal in reject mode: %d %q", a.Code, a.Body)
	}
	Do(t, Client(t), "GET", r.Base+"/healthz", nil).Status(t, 200, "ok")
	Do(t, Client(t), "GET", r.Base+"/readyz", nil).Status(t, 503, "draining")
	close(release)
	if a := Recv(t, slow, "the in-flight request's answer").OK(t); a.Code != 200 {
		t.Fatalf("the in-flight request got %d", a.Code)
	}
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	return a
}

// WantRefusal fails t unless a is reject mode's refusal with
// SendRetryAfter: 503, Retry-After 1, Connection: close, and lameduck's
// body.
func WantRefusal(t testing.TB, a Reply) {
	t.Helper()
	if a.Code != 503 || a.Header.Get("Retry-After") != "1" || !a.Close || a.Body != "lameduck: shutting down; retry on another instance\n" {
		t.Fatalf("reject mode: %d %v %q", a.Code, a.Header, a.Body)
	}
}

// DrainServesInFlight drives r's started Lifecycle (ShutdownDelay 2s,
// ShutdownTeardown well beyond) through a drain with a request in flight:
// GET /slow must close entered, wait for release and answer "slept"; GET /
// answers "hello". The request in flight at the signal completes with 200
// while /readyz is 503 draining and /healthz 200 on the same listener;
// requests in the window are served with Connection: close; the teardown
// waits for the request, Run returns nil, and the listener is closed after.
// framework names the server in the failures.
func DrainServesInFlight(t testing.TB, r *HTTPRig, framework string, entered, release chan struct{}) {
	t.Helper()
	c := Client(t)
	Do(t, c, "GET", r.Base+"/readyz", nil).Status(t, 200, "ok")
	if a := Do(t, c, "GET", r.Base+"/", nil); a.Code != 200 || a.Close {
		t.Fatalf("before the signal: %d close=%v", a.Code, a.Close)
	}
	slow := GoFetch(Client(t), "GET", r.Base+"/slow")
	Recv(t, entered, "the /slow handler")
	if got := r.LC.InFlight(); len(got) != 1 || got[0].Method != "GET" || got[0].Path != "/slow" {
		t.Fatalf("InFlight = %+v; want GET /slow", got)
	}
	r.LC.BeginShutdown("test")
	Do(t, c, "GET", r.Base+"/readyz", nil).Status(t, 503, "draining")
	Do(t, c, "GET", r.Base+"/healthz", nil).Status(t, 200, "ok")
	// The keep-alive connection used above is told to close, and the
	// next request goes on a fresh one, still served.
	if a := Do(t, c, "GET", r.Base+"/", nil); a.Code != 200 || !a.Close || a.Body != "hello" {
		t.Fatalf("in the window: %d close=%v %q; want 200 with Connection: close", a.Code, a.Close, a.Body)
	}
	if a := Do(t, c, "GET", r.Base+"/", nil); a.Code != 200 {
		t.Fatalf("the next request in the window: %d", a.Code)
	}
	Timers(t, r.Clk, 1)
	r.Clk.Advance(2 * time.Second)
	Await(t, r.LC.Events().WindowEnded)
	if r.LC.Events().HTTPDrained.Fired() {
		t.Fatal("the drain ended with a request in flight")
	}
	close(release)
	if a := Recv(t, slow, "the in-flight request's answer").OK(t); a.Code != 200 || a.Body != "slept" {
		t.Fatalf("the in-flight request got %d %q", a.Code, a.Body)
	}
	if err := r.Wait(); err != nil {
		t.Fatalf("Run = %v; want a clean drain", err)
	}
	if _, err := c.Get(r.Base + "/"); err == nil {
		t.Fatalf("the %s listener still accepts after Run returned", framework)
	}
}

// StuckRequestIsCut drives r's started Lifecycle (ShutdownDelay 1s,
// ShutdownTeardown 3s) with a request that outlives the teardown: POST
// /stuck must close entered and then ignore everything until the test
// ends. The request is cut, Run's error wraps context.DeadlineExceeded (a
// non-zero exit), and the log names it with method, path and age.
func StuckRequestIsCut(t testing.TB, r *HTTPRig, entered chan struct{}) {
	t.Helper()
	reqDone := GoFetch(Client(t), "POST", r.Base+"/stuck")
	Recv(t, entered, "the /stuck handler")
	lameducktest.EndWindow(t, r.LC, r.Clk)
	Timers(t, r.Clk, 1) // the drain's deadline
	r.Clk.Advance(3 * time.Second)
	err := r.Wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want an error wrapping context.DeadlineExceeded", err)
	}
	if f := Recv(t, reqDone, "the stuck request's end"); f.Err == nil {
		t.Fatalf("the stuck request was answered %d; it should have been cut", f.Code)
	}
	if logs := r.Logs.String(); !strings.Contains(logs, "HTTP drain cut 1 in-flight request(s) after 3s: POST /stuck (age 4s)") {
		t.Fatalf("the cut request is not named with method, path and age:\n%s", logs)
	}
}

// StreamIsTracked drives r's started Lifecycle (ShutdownTeardown beyond
// 1s) with a streamed body: GET /events must write "data: hello\n\n",
// flush, wait for the window's end and write "event: bye\n\n". The stream
// is in flight as GET /events while it runs, ends with its final event
// when the window ends, the teardown waits for it, Run returns nil, and
// nothing is in flight after.
func StreamIsTracked(t testing.TB, r *HTTPRig) {
	t.Helper()
	resp, err := Client(t).Get(r.Base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "data: hello\n" {
		t.Fatalf("first line %q", line)
	}
	if got := r.LC.InFlight(); len(got) != 1 || got[0].Method != "GET" || got[0].Path != "/events" {
		t.Fatalf("InFlight while streaming = %+v; want GET /events", got)
	}
	lameducktest.EndWindow(t, r.LC, r.Clk)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "event: bye\n\n") {
		t.Fatalf("the stream ended with %q, %v; want the final event", rest, err)
	}
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := r.LC.InFlight(); len(got) != 0 {
		t.Fatalf("InFlight after the stream = %+v", got)
	}
}

// AwaitHijacked waits, polling every 10ms for up to 5s, until exactly one
// request is in flight on lc and it is hijacked (a WebSocket or another
// upgraded connection), and returns what InFlight then returns. It fails
// t, showing what was in flight, when that does not happen.
func AwaitHijacked(t testing.TB, lc *lameduck.Lifecycle) []lameduck.InFlightRequest {
	t.Helper()
	var got []lameduck.InFlightRequest
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = lc.InFlight(); len(got) == 1 && got[0].Hijacked {
			return got
		}
	}
	t.Fatalf("InFlight = %+v; want one request, hijacked", got)
	return nil
}

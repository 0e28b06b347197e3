package ldfasthttp_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	ldfasthttp "github.com/lameduck/lameduck/contrib/fasthttp"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/lameducktest"
	"github.com/valyala/fasthttp"
)

// probeRig is a Lifecycle on a fake clock serving app through the
// middleware on a fasthttp server, and its base URL.
func probeRig(t *testing.T, cfg lameduck.Config, app fasthttp.RequestHandler) (*lameduck.Lifecycle, *lameducktest.Clock, string, func() error) {
	t.Helper()
	logs := &testsupport.LogBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.CheckTimeout = testsupport.Timeout
	lc, clk := lameducktest.New(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	ln := listen(t)
	srv := &fasthttp.Server{Handler: ldfasthttp.New(lc).Handler(app)}
	if err := ldfasthttp.AddServer(lc, srv, "", ln); err != nil {
		t.Fatal(err)
	}
	return lc, clk, "http://" + ln.Addr().String(), lameducktest.Start(t, lc)
}

// Probes through the fasthttp middleware are not application requests, as
// on net/http (docs/probes-and-shutdown.md): asked all through an
// idle-drain window, they do not push its end past its minimum; and in
// reject mode, where new requests get 503, /healthz still answers 200 and
// /readyz 503 draining.
func TestProbesAreNotApplicationRequestsOnFastHTTP(t *testing.T) {
	c := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	t.Run("idle drain", func(t *testing.T) {
		lc, clk, base, wait := probeRig(t, lameduck.Config{DrainMode: lameduck.DrainIdle, ShutdownDelay: time.Second,
			IdleWindow: 2 * time.Second, DrainTimeout: 20 * time.Second}, func(fc *fasthttp.RequestCtx) {})
		// Off the clock's first instant, which the idle drain could not
		// tell from no traffic at all.
		clk.Advance(100 * time.Millisecond)
		lc.BeginShutdown("test")
		for _, p := range []string{"/healthz", "/readyz", "/startupz"} {
			testsupport.Do(t, c, "GET", base+p, nil)
		}
		if got := lc.InFlight(); len(got) != 0 {
			t.Fatalf("InFlight() after probes = %v", got)
		}
		testsupport.Timers(t, clk, 1) // the window's
		clk.Advance(time.Second)
		testsupport.Await(t, lc.Events().WindowEnded)
		if a, _ := lc.Events().ShutdownInitiated.At(); !a.Add(time.Second).Equal(clk.Now()) {
			t.Fatal("probes held the idle drain past its 1s minimum")
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reject mode", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		lc, clk, base, wait := probeRig(t, lameduck.Config{ShutdownDelay: time.Second, SendRetryAfter: true}, func(fc *fasthttp.RequestCtx) {
			if string(fc.Path()) == "/slow" {
				close(entered)
				<-release
			}
		})
		slow := testsupport.GoFetch(c, "GET", base+"/slow")
		testsupport.Recv(t, entered, "the /slow handler")
		lameducktest.EndWindow(t, lc, clk)
		var a testsupport.Reply
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && a.Code != 503; {
			a = testsupport.Do(t, c, "GET", base+"/new", nil)
		}
		if a.Code != 503 {
			t.Fatalf("no refusal in reject mode: %d %q", a.Code, a.Body)
		}
		testsupport.Do(t, c, "GET", base+"/healthz", nil).Status(t, 200, "ok")
		testsupport.Do(t, c, "GET", base+"/readyz", nil).Status(t, 503, "draining")
		close(release)
		if a := testsupport.Recv(t, slow, "the in-flight request's answer").OK(t); a.Code != 200 {
			t.Fatalf("the in-flight request got %d", a.Code)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	})
}

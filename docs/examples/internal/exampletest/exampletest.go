// Package exampletest drives the framework examples of docs/frameworks.md
// through a Lifecycle's whole life on lameducktest's fake clock: boot,
// probes, the framework's own middleware and routes, a request in flight
// across the signal, the lame-duck window and the drain.
package exampletest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/lameducktest"
)

// reply is one HTTP answer, read in full.
type reply struct {
	code int
	body string
}

func (r reply) status() string {
	var b struct{ Status string }
	_ = json.Unmarshal([]byte(r.body), &b)
	return b.Status
}

// Drive runs the example's handler, built by build from the Lifecycle and a
// slow handler to mount at GET /slow, and checks, over real HTTP:
//
//  1. while serving: /healthz and /readyz answer 200 without the API key
//     (lameduck answers them before the framework's middleware), /hello
//     without the key is the framework's refusal (4xx), with it a 200 whose body
//     names framework;
//  2. a GET /slow in flight when the shutdown starts: /readyz turns 503
//     draining at once, /hello is still served through the window;
//  3. the window ends (on the fake clock), the drain waits for /slow, which
//     then answers 200, and Run returns nil.
func Drive(t *testing.T, framework string, build func(lc *lameduck.Lifecycle, slow http.Handler) http.Handler) {
	t.Helper()
	cfg := lameduck.Config{ShutdownDelay: 5 * time.Second, ShutdownTeardown: 30 * time.Second}
	clk := lameducktest.Configure(t, &cfg)
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			io.WriteString(w, "slow done")
		case <-r.Context().Done():
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.AddServer(&http.Server{Handler: build(lc, slow)}, ln); err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	get := func(path string, key bool) reply {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key {
			req.Header.Set("X-API-Key", "k")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return reply{resp.StatusCode, string(b)}
	}

	wait := lameducktest.Start(t, lc)

	// 1. Serving.
	for _, p := range []string{"/healthz", "/readyz", "/startupz"} {
		if r := get(p, false); r.code != http.StatusOK || r.status() != "ok" {
			t.Fatalf("GET %s without the API key = %d %s; want 200 ok from lameduck, before %s's middleware", p, r.code, r.body, framework)
		}
	}
	if r := get("/hello", false); r.code < 400 || r.code > 499 {
		t.Fatalf("GET /hello without the API key = %d %s; want %s's refusal (4xx)", r.code, r.body, framework)
	}
	if r := get("/hello", true); r.code != http.StatusOK || !strings.Contains(r.body, `"hello":"`+framework+`"`) ||
		!strings.Contains(r.body, `"phase":"serving"`) {
		t.Fatalf("GET /hello = %d %s; want 200 from %s while serving", r.code, r.body, framework)
	}

	// 2. A request in flight across the signal.
	slowDone := make(chan reply, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/slow", nil)
		req.Header.Set("X-API-Key", "k")
		resp, err := client.Do(req)
		if err != nil {
			slowDone <- reply{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		slowDone <- reply{resp.StatusCode, string(b)}
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if inFlight(lc, "/slow") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GET /slow never showed up in lc.InFlight()")
		}
	}
	lc.BeginShutdown("test")
	if r := get("/readyz", false); r.code != http.StatusServiceUnavailable || r.status() != "draining" {
		t.Fatalf("GET /readyz after the signal = %d %s; want 503 draining", r.code, r.body)
	}
	if r := get("/healthz", false); r.code != http.StatusOK {
		t.Fatalf("GET /healthz after the signal = %d %s; want 200: liveness never fails during the drain", r.code, r.body)
	}
	if r := get("/hello", true); r.code != http.StatusOK || !strings.Contains(r.body, `"phase":"draining"`) {
		t.Fatalf("GET /hello during the window = %d %s; want 200: the window keeps serving", r.code, r.body)
	}

	// 3. The window ends; the drain waits for /slow.
	lameducktest.EndWindow(t, lc, clk)
	select {
	case r := <-slowDone:
		t.Fatalf("GET /slow answered before it was released: %d %s", r.code, r.body)
	default:
	}
	close(release)
	if r := <-slowDone; r.code != http.StatusOK || r.body != "slow done" {
		t.Fatalf("GET /slow in flight across the drain = %d %q; want 200 \"slow done\"", r.code, r.body)
	}
	if err := wait(); err != nil {
		t.Fatalf("Run returned %v; want nil: nothing was cut", err)
	}
}

func inFlight(lc *lameduck.Lifecycle, path string) bool {
	for _, r := range lc.InFlight() {
		if r.Path == path {
			return true
		}
	}
	return false
}

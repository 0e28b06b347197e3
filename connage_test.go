package lameduck_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
)

// MaxConnectionAge (1m ±10% here) ends a client connection at its first
// request after that age, on the Lifecycle's clock: HTTP/1 closes after the
// response, HTTP/2 gets GOAWAY (net/http turns Connection: close into one).
// The test counts the connections the client had to open — one for each
// close or GOAWAY — and the request that found the connection old is
// served in full.
func TestMaxConnectionAgeClosesOldConnections(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			h := newHarness(t, lameduck.Config{ShutdownDelay: time.Second, MaxConnectionAge: time.Minute})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var p http.Protocols
			p.SetHTTP1(true)
			p.SetUnencryptedHTTP2(true)
			if err := h.lc.AddServer(&http.Server{Handler: okHandler, Protocols: &p}, ln); err != nil {
				t.Fatal(err)
			}
			h.start(t)

			var cp http.Protocols
			if proto == "HTTP/2.0" {
				cp.SetUnencryptedHTTP2(true)
			} else {
				cp.SetHTTP1(true)
			}
			tr := &http.Transport{Protocols: &cp}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			var opened atomic.Int32
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				if !i.Reused {
					opened.Add(1)
				}
			}}
			get := func(step string, wantOpened int32) {
				t.Helper()
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", "http://"+ln.Addr().String()+"/", nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Proto != proto {
					t.Fatalf("%s: %s %d; want %s 200", step, resp.Proto, resp.StatusCode, proto)
				}
				if n := opened.Load(); n != wantOpened {
					t.Fatalf("%s: %d connection(s) opened; want %d", step, n, wantOpened)
				}
			}
			get("first request", 1)
			h.clock.Advance(50 * time.Second) // under 1m − 10%
			get("at 50s", 1)
			h.clock.Advance(20 * time.Second) // over 1m + 10%
			get("at 70s: served, then closed (HTTP/1) or GOAWAY (HTTP/2)", 1)
			get("after the close", 2)
			get("on the new connection", 2)
			h.clock.Advance(70 * time.Second)
			get("the new connection at 70s", 2)
			get("after its close", 3)

			h.lc.BeginShutdown("test")
			h.endWindow(time.Second)
			if err := h.wait(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Fatal(err)
			}
		})
	}
}

// A negative age is refused at startup, naming the setting; 0s is off.
func TestMaxConnectionAgeSetting(t *testing.T) {
	_, err := newFromEnv(t, map[string]string{"LAMEDUCK_MAX_CONNECTION_AGE": "-1m"}, lameduck.Config{})
	if !errors.As(err, new(*lameduck.ConfigError)) || !strings.Contains(err.Error(), "LAMEDUCK_MAX_CONNECTION_AGE") {
		t.Fatalf("-1m: err = %v; want a *ConfigError naming LAMEDUCK_MAX_CONNECTION_AGE", err)
	}
	lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_MAX_CONNECTION_AGE": "10m"}, lameduck.Config{})
	if err != nil || lc.Config().MaxConnectionAge != 10*time.Minute {
		t.Fatalf("10m: %v", err)
	}
}

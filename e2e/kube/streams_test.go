package kube_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// streamClients is how many WebSocket and how many server-sent-event
// clients TestStreamsThroughRestarts holds open against each server: with
// three replicas, every pod has some whatever kube-proxy picks.
const streamClients = 6

// streamTally counts how the streams of one kind of client ended.
type streamTally struct {
	mu sync.Mutex
	// Clean counts streams the server ended as a protocol says: a
	// WebSocket close frame 1001 (going away, RFC 6455 §7.4.1), or a
	// server-sent-event stream that ended after the demo's final "bye"
	// event.
	Clean int
	// Cut counts streams that ended any other way while the client still
	// wanted them: a reset, an EOF without a close frame or final event.
	Cut int
	// Refused counts connection attempts that failed before a stream
	// began (a 503 to the upgrade, a refused dial); the client tries again.
	Refused  int
	Examples []string
	// Refusals are examples of why an attempt was refused.
	Refusals []string
	// open is how many streams are open now.
	open atomic.Int32
}

func (s *streamTally) add(clean bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if clean {
		s.Clean++
		return
	}
	s.Cut++
	if len(s.Examples) < 5 {
		s.Examples = append(s.Examples, time.Now().Format("15:04:05.000")+" "+err.Error())
	}
}

func (s *streamTally) refused(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Refused++
	if len(s.Refusals) < 5 {
		s.Refusals = append(s.Refusals, time.Now().Format("15:04:05.000")+" "+why)
	}
}

func (s *streamTally) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d ended cleanly, %d cut, %d connection attempts refused; cuts: %q; refusals: %q", s.Clean, s.Cut, s.Refused, s.Examples, s.Refusals)
}

// webSocketClient holds a WebSocket to url's /ws until ctx ends, sending
// a message every 100ms and reading each echo; when the server ends the
// stream it counts how, and connects again.
func webSocketClient(ctx context.Context, url string, tally *streamTally) {
	for ctx.Err() == nil {
		c, _, err := websocket.Dial(ctx, url+"/ws", &websocket.DialOptions{HTTPClient: &http.Client{
			Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}})
		if err != nil {
			if ctx.Err() == nil {
				tally.refused(err.Error())
				sleepCtx(ctx, 200*time.Millisecond)
			}
			continue
		}
		tally.open.Add(1)
		// The reader says how the stream ended: coder/websocket returns
		// the peer's close frame from Read once it has answered it.
		readErr := make(chan error, 1)
		go func() {
			for {
				if _, _, err := c.Read(ctx); err != nil {
					readErr <- err
					return
				}
			}
		}()
		tick := time.NewTicker(100 * time.Millisecond)
	write:
		for n := 0; ; n++ {
			select {
			case err := <-readErr:
				if ctx.Err() == nil {
					tally.add(websocket.CloseStatus(err) == websocket.StatusGoingAway, err)
				}
				break write
			case <-tick.C:
				_ = c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, "ping %d", n)) // the reader reports a broken stream
			}
		}
		tick.Stop()
		c.CloseNow()
		tally.open.Add(-1)
	}
}

// eventsClient reads url's /events until ctx ends; when the server ends
// the stream it counts how, and connects again.
func eventsClient(ctx context.Context, url string, tally *streamTally) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/events", nil)
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			why := ""
			if err == nil {
				why = "status " + resp.Status
				resp.Body.Close()
			} else {
				why = err.Error()
			}
			if ctx.Err() == nil {
				tally.refused(why)
				sleepCtx(ctx, 200*time.Millisecond)
			}
			continue
		}
		tally.open.Add(1)
		bye := false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "event: bye" {
				bye = true
			}
		}
		err = sc.Err()
		resp.Body.Close()
		tally.open.Add(-1)
		if ctx.Err() != nil {
			return
		}
		if err == nil && !bye {
			err = errors.New("the stream ended without the final event")
		}
		tally.add(bye && err == nil, err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// TestStreamsThroughRestarts holds WebSocket and server-sent-event clients
// open through the ClusterIP while the pods go through rolling restarts:
// the demo as the chart ships it, beside Go's default server with a
// native `preStop: sleep` serving the same streams as a user writes them
// (images/naive). Each client reconnects when its stream ends and counts
// how it ended.
//
// lameduck must end every stream as its protocol says (a close frame 1001
// going away; the final "bye" event) and cut none, and must have ended
// some of each (the streams did cross pods that left). The control must
// cut some: the test can see a server that ends streams by exiting. Its
// counts are reported, never judged.
func TestStreamsThroughRestarts(t *testing.T) {
	needCluster(t)
	contenders := []struct {
		name, slug string
		lameduck   bool
		deploy     func(e *env) string
	}{
		{"lameduck (the chart as shipped)", "streams-lameduck", true, func(e *env) string { e.helmInstall("lameduck-demo", nil); return "lameduck-demo" }},
		{"Go's default server + preStop sleep 5s", "streams-prestop", false, func(e *env) string {
			e.deployNaiveAs("naive", naiveShape{Replicas: 3, PreStopSleep: 5})
			return "naive"
		}},
	}
	for _, c := range contenders {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, c.slug)
			name := c.deploy(e)
			url := e.serviceURL(name)
			ctx, cancel := context.WithCancel(t.Context())
			var ws, sse streamTally
			var wg sync.WaitGroup
			stopped := false
			stop := func() {
				if !stopped {
					stopped = true
					cancel()
					wg.Wait()
				}
			}
			defer stop()
			for range streamClients {
				wg.Go(func() { webSocketClient(ctx, url, &ws) })
				wg.Go(func() { eventsClient(ctx, url, &sse) })
			}
			allOpen := func(when string) {
				waitUntil(t, time.Minute, "every stream open "+when, func() error {
					if w, s := ws.open.Load(), sse.open.Load(); w != streamClients || s != streamClients {
						return fmt.Errorf("%d WebSocket and %d event streams open, want %d of each", w, s, streamClients)
					}
					return nil
				})
			}
			allOpen("before the restarts")
			const rounds = 2
			for range rounds {
				e.restart(name)
				e.waitRolledOut(name, 4*time.Minute)
			}
			allOpen("after the restarts") // each client is back on a pod that stays
			stop()
			t.Logf("%s, WebSocket: %s", c.name, &ws)
			t.Logf("%s, server-sent events: %s", c.name, &sse)
			if !c.lameduck {
				if ws.Cut == 0 || sse.Cut == 0 {
					t.Errorf("%s cut no WebSocket (%d) or no event stream (%d) by exiting through %d rolling restarts: the test cannot see a cut", c.name, ws.Cut, sse.Cut, rounds)
				}
				return
			}
			for _, k := range []struct {
				what  string
				tally *streamTally
			}{{"WebSocket", &ws}, {"server-sent events", &sse}} {
				if k.tally.Cut != 0 {
					t.Errorf("%s: %d streams cut, want 0: %q", k.what, k.tally.Cut, k.tally.Examples)
				}
				if k.tally.Clean < streamClients {
					t.Errorf("%s: %d streams ended by a leaving pod through %d rolling restarts, want at least %d: the streams did not cross a restart", k.what, k.tally.Clean, rounds, streamClients)
				}
			}
		})
	}
}

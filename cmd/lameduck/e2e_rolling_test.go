package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// balancer is a small load balancer as a cloud one behaves: it probes each
// backend's /readyz every probeEvery and sends traffic, round robin, only
// to the backends whose last probe said 200. It never retries a request.
type balancer struct {
	proxy *httputil.ReverseProxy

	mu       sync.Mutex
	backends []*url.URL        // guarded by mu
	ready    map[*url.URL]bool // guarded by mu
	next     int               // guarded by mu
}

const probeEvery = 200 * time.Millisecond

func newBalancer() *balancer {
	b := &balancer{ready: map[*url.URL]bool{}}
	b.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			if u := b.pick(); u != nil {
				r.SetURL(u)
			}
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}
	return b
}

func (b *balancer) add(u *url.URL) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = append(b.backends, u)
}

func (b *balancer) pick() *url.URL {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range b.backends {
		u := b.backends[b.next%len(b.backends)]
		b.next++
		if b.ready[u] {
			return u
		}
	}
	return nil
}

// isReady reports whether the last probe of u said 200.
func (b *balancer) isReady(u *url.URL) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ready[u]
}

// waitReady waits until the balancer's view of u is ready, failing the test
// after timeout.
func (b *balancer) waitReady(t *testing.T, u *url.URL, ready bool, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); b.isReady(u) != ready; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the balancer did not see %s as ready=%v within %s", u, ready, timeout)
		}
	}
}

// probe runs the readiness probes until ctx ends.
func (b *balancer) probe(ctx context.Context) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		b.mu.Lock()
		backends := append([]*url.URL(nil), b.backends...)
		b.mu.Unlock()
		for _, u := range backends {
			ok := false
			if resp, err := c.Get(u.String() + "/readyz"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			}
			b.mu.Lock()
			b.ready[u] = ok
			b.mu.Unlock()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// TestE2ERollingRestartZeroFailures restarts three replicas of the demo,
// one after the other, behind a load balancer that follows /readyz, under
// about 300 requests per second (a third of them GET /slow?d=200ms, so
// requests are in flight at every SIGTERM), and counts every request that
// did not get a 200: there must be none. TestE2EFiber runs it against the
// Fiber demo.
//
// As a Deployment with maxSurge 1 does, each old replica gets SIGTERM once
// its replacement is ready (here: ready in the balancer's eyes), and the
// next step begins once the old one is out of the balancer, while it still
// drains. The 4s window is twenty probe intervals: a prober (this process)
// stalled for seconds on a loaded machine still takes the old replica out
// before its listener closes.
func TestE2ERollingRestartZeroFailures(t *testing.T) {
	t.Parallel()
	const delay = 4 * time.Second
	demoEnv := env("LAMEDUCK_SHUTDOWN_DELAY", "4s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "5s")
	lb := newBalancer()
	urls := map[*proc]*url.URL{}
	start := func() *proc {
		p := startDemo(t, demoEnv)
		u, err := url.Parse(p.base)
		if err != nil {
			t.Fatal(err)
		}
		lb.add(u)
		urls[p] = u
		return p
	}
	replicas := []*proc{start(), start(), start()}

	front := &http.Server{Handler: lb.proxy}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go front.Serve(ln)
	defer front.Close()
	ctx, stop := context.WithCancel(context.Background())
	var probing sync.WaitGroup
	probing.Go(func() { lb.probe(ctx) })
	defer probing.Wait()
	defer stop()
	for deadline := time.Now().Add(10 * time.Second); lb.pick() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the balancer found no ready backend")
		}
	}

	// The load: open loop, one request every 3.3ms, on keep-alive
	// connections through the balancer.
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	var sent, failed atomic.Int64
	var failures sync.Map
	var load sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(context.Background())
	load.Go(func() {
		tick := time.NewTicker(time.Second / 300)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			path := "/"
			if i%3 == 0 {
				path = "/slow?d=200ms"
			}
			sent.Add(1)
			load.Go(func() {
				resp, err := client.Get("http://" + ln.Addr().String() + path)
				if err != nil {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%s: %v", path, err), true)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%s: %d", path, resp.StatusCode), true)
				}
			})
		}
	})

	var stopped []*proc
	for i, old := range replicas {
		time.Sleep(500 * time.Millisecond) // steady traffic between restarts
		replicas[i] = start()              // the new pod first (maxSurge 1)
		lb.waitReady(t, urls[replicas[i]], true, 20*time.Second)
		old.signal(syscall.SIGTERM)
		stopped = append(stopped, old)
		lb.waitReady(t, urls[old], false, 20*time.Second) // out of the balancer; it drains on
	}
	for i, old := range stopped {
		if code, _ := old.waitExit(delay + 20*time.Second); code != 0 {
			t.Errorf("replica %d exited %d; want 0", i, code)
		}
	}
	time.Sleep(500 * time.Millisecond)
	stopLoad()
	load.Wait()
	t.Logf("%d requests through the rolling restart, %d failed", sent.Load(), failed.Load())
	failures.Range(func(k, _ any) bool { t.Errorf("failed: %s", k); return true })
	if sent.Load() < 500 {
		t.Errorf("only %d requests sent; the load did not run", sent.Load())
	}
}

package kube_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// clientShape is how a load's client holds its connections.
type clientShape string

const (
	// fresh opens a connection per request (a client behind kube-proxy that
	// does not keep connections alive: every request is a new routing
	// decision).
	fresh clientShape = "fresh connections"
	// keepAlive is Go's HTTP/1.1 transport with its pool of idle
	// connections: conntrack pins each to the pod it was routed to.
	keepAlive clientShape = "HTTP/1.1 keep-alive"
	// h2c is HTTP/2 without TLS (prior knowledge) through Go's transport:
	// every request of the load multiplexed on a connection or two.
	h2c clientShape = "HTTP/2 (h2c)"
	// nginxUpstream is Debian's nginx on the node proxying to the
	// Service's ClusterIP with a pool of keep-alive connections, as an
	// ingress with `service-upstream` does (startNginx); the load reaches
	// nginx over an HTTP/1.1 keep-alive pool, and nginx's 502s count as
	// failed.
	nginxUpstream clientShape = "nginx, service-upstream"
	// traefikEndpoints is Traefik in the cluster as the namespace's
	// ingress controller, routing to the Service's endpoints as it reads
	// them from EndpointSlices (startTraefik), not through the ClusterIP;
	// the load reaches Traefik over an HTTP/1.1 keep-alive pool, and its
	// 502s and 503s count as failed.
	traefikEndpoints clientShape = "Traefik, endpoints"
)

var clientShapes = []clientShape{fresh, keepAlive, h2c, nginxUpstream, traefikEndpoints}

// load is open-loop traffic through a URL: rate requests a second whatever
// the server does (vegeta's constant pacer), alternating GET / and POST
// /echo, over connections held as its clientShape says, with a 10s timeout
// and no retries of its own (the transport's re-sends are counted).
type load struct {
	stop     func()
	done     chan struct{}
	mu       sync.Mutex
	total    int
	failed   int
	kinds    map[string]int
	examples []string
	failedAt []time.Time // when each failed request was sent
	failedAs []string    // and how it failed (classify), in the same order
	dials    sync.Map    // request id -> *atomic.Int32: connections it took
	resent   atomic.Int64
	resentAt []time.Time // when each re-sent request was sent (under mu)
	// refusedAt is when each request was sent that an HTTP/2 server
	// refused with its GOAWAY and the transport re-sent (under mu)
	refusedAt []time.Time
	// lateFailed and lateResent count the HTTP/1.1 requests that failed,
	// or were re-sent, after the client wrote them on a connection whose
	// server had already closed it (see finConn).
	lateFailed, lateResent atomic.Int64
	// idPrefix, when set, names every request in an X-Request-Id header
	// (idPrefix and the request's number), and answered gathers the names
	// of those answered 2xx (under mu): what an audit row must stand for.
	idPrefix string
	answered map[string]bool
}

// countingTransport counts the connections each request takes: a request
// that took a second one was re-sent by the transport. On HTTP/2 it tells
// apart the re-sends of streams the server refused with its GOAWAY (the
// first connection had read one by then): RFC 9113 §6.8 says the server
// processed none of them, and Go's HTTP/2 transport re-sends only such
// requests (refused or never started), never one a server may have seen.
type countingTransport struct {
	next http.RoundTripper
	l    *load
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	id := r.Header.Get("X-Load-Id")
	n := new(atomic.Int32)
	sent := time.Now()
	c.l.dials.Store(id, n)
	defer c.l.dials.Delete(id)
	var first atomic.Pointer[goawayConn]
	var last atomic.Pointer[finConn]
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		f, _ := info.Conn.(*finConn)
		prev := last.Swap(f)
		switch n.Add(1) {
		case 1:
			if g, ok := info.Conn.(*goawayConn); ok {
				first.Store(g)
			}
		case 2:
			if prev != nil && prev.late.Load() {
				c.l.lateResent.Add(1)
			}
			c.l.mu.Lock()
			defer c.l.mu.Unlock()
			if g := first.Load(); g != nil && g.goaway.Load() {
				c.l.refusedAt = append(c.l.refusedAt, sent)
				return
			}
			c.l.resent.Add(1)
			c.l.resentAt = append(c.l.resentAt, sent)
		}
	}}
	res, err := c.next.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	if f := last.Load(); err != nil && f != nil && f.late.Load() {
		c.l.lateFailed.Add(1)
	}
	if c.l.answered != nil && err == nil && res.StatusCode >= 200 && res.StatusCode < 300 {
		c.l.mu.Lock()
		c.l.answered[r.Header.Get("X-Request-Id")] = true
		c.l.mu.Unlock()
	}
	return res, err
}

// finConn is an HTTP/1.1 client connection that notes whether the client
// wrote on it after the server had closed it: before each write it peeks,
// without blocking, at what the kernel holds for it, and an end of stream
// (the server's FIN) or a reset there means the server closed the
// connection before this request left the client. Go's transport learns
// of the FIN only when its reader goroutine runs; a client stalled at that
// moment takes the closed connection from its idle pool, and a request it
// may not replay (a POST) fails with EOF. No HTTP/1.1 server can prevent
// that: it has no way to close an idle connection but to close it (RFC
// 9112 §9.6), and a request written after the close never reached it.
type finConn struct {
	net.Conn
	late atomic.Bool
}

func (c *finConn) Write(p []byte) (int, error) {
	if !c.late.Load() && peerClosed(c.Conn) {
		c.late.Store(true)
	}
	return c.Conn.Write(p)
}

// peerClosed reports whether c's peer has closed it: a peek at the socket
// reads an end of stream or a reset.
func peerClosed(c net.Conn) bool {
	n, err := peek(c)
	return (n == 0 && err == nil) || err == syscall.ECONNRESET
}

// peek looks, without blocking and without consuming it, at one byte the
// kernel holds for c: 1 when bytes wait, 0 and a nil error at the peer's
// FIN, EAGAIN when nothing has come. It runs under RawConn.Control, which
// does not wait for the transport's reader blocked in Read on the same
// socket.
func peek(c net.Conn) (n int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	if cerr := rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); cerr != nil {
		return -1, cerr
	}
	return n, err
}

// goawayConn is an HTTP/2 (h2c) client connection that notes whether the
// server's GOAWAY frame has reached it: it reads the frame headers of what
// the server sends (h2c with prior knowledge: frames from the first byte,
// RFC 9113 §3.4 and §4.1). Read is called by the transport's one reader.
type goawayConn struct {
	net.Conn
	hdr    []byte // the frame header read so far
	skip   int    // payload bytes of the current frame still to come
	goaway atomic.Bool
}

func (c *goawayConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip, b = c.skip-k, b[k:]
			continue
		}
		k := min(9-len(c.hdr), len(b))
		c.hdr, b = append(c.hdr, b[:k]...), b[k:]
		if len(c.hdr) == 9 {
			if c.hdr[3] == 0x7 { // GOAWAY
				c.goaway.Store(true)
			}
			c.skip, c.hdr = int(c.hdr[0])<<16|int(c.hdr[1])<<8|int(c.hdr[2]), c.hdr[:0]
		}
	}
	return n, err
}

// loadWorkers bounds a load's requests in flight. A server that answers
// within 10ms needs one at 100 requests a second; 64 leave room for every
// request of a drain to hang to its timeout while the load goes on.
const loadWorkers = 64

// wrapDial makes tr wrap each connection it dials with wrap.
func wrapDial(tr *http.Transport, wrap func(net.Conn) net.Conn) {
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	}
}

// startLoad sends load over fresh connections.
func startLoad(url string, rate int) *load { return startShapedLoad(url, rate, fresh) }

func startShapedLoad(url string, rate int, shape clientShape) *load {
	return startNamedLoad(url, rate, shape, "")
}

// startNamedLoad is startShapedLoad whose requests carry X-Request-Id
// idPrefix+n when idPrefix is not empty; the load keeps the ids answered 2xx.
func startNamedLoad(url string, rate int, shape clientShape, idPrefix string) *load {
	l := &load{kinds: map[string]int{}, done: make(chan struct{}), idPrefix: idPrefix}
	if idPrefix != "" {
		l.answered = map[string]bool{}
	}
	tr := &http.Transport{
		DialContext:     (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig: &tls.Config{},
	}
	switch shape {
	case fresh:
		tr.DisableKeepAlives, tr.MaxIdleConnsPerHost = true, -1
	case keepAlive, nginxUpstream, traefikEndpoints:
		tr.MaxIdleConnsPerHost = 64
		wrapDial(tr, func(c net.Conn) net.Conn { return &finConn{Conn: c} })
	case h2c:
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
		wrapDial(tr, func(c net.Conn) net.Conn { return &goawayConn{Conn: c} })
	default:
		panic("unknown client shape " + string(shape))
	}
	client := &http.Client{Transport: countingTransport{tr, l}, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var seq atomic.Int64
	targeter := func(t *vegeta.Target) error {
		n := seq.Add(1)
		t.Header = http.Header{"X-Load-Id": {strconv.FormatInt(n, 10)}}
		if idPrefix != "" {
			t.Header.Set("X-Request-Id", idPrefix+strconv.FormatInt(n, 10))
		}
		if n%2 == 0 {
			t.Method, t.URL, t.Body = http.MethodGet, url+"/", nil
		} else {
			t.Method, t.URL, t.Body = http.MethodPost, url+"/echo", []byte(`{"n":`+strconv.FormatInt(n, 10)+`}`)
			t.Header.Set("Content-Type", "application/json")
		}
		return nil
	}
	// At most loadWorkers requests in flight: when the machine stalls, the
	// pacer falls behind instead of opening thousands of connections, whose
	// cost stalls the machine further (with -race on two cores, one load of
	// 4096 workers grew the test to 6 GB and timed out nearly every request
	// of every server alike).
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.MaxWorkers(loadWorkers))
	// Stopping also closes the idle connections of the pool, so a proxy in
	// front (nginx) is not left waiting on them at its graceful stop.
	l.stop = func() { atk.Stop(); tr.CloseIdleConnections() }
	go func() {
		defer close(l.done)
		for res := range atk.Attack(targeter, vegeta.Rate{Freq: rate, Per: time.Second}, 0, "rollout") {
			l.record(res)
		}
	}()
	return l
}

func (l *load) record(res *vegeta.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if res.Error == "" && res.Code >= 200 && res.Code < 300 {
		return
	}
	l.failed++
	l.failedAt = append(l.failedAt, res.Timestamp)
	kind := classify(res)
	l.failedAs = append(l.failedAs, kind+" "+res.Error)
	l.kinds[kind]++
	if len(l.examples) < 5 {
		l.examples = append(l.examples, fmt.Sprintf("%s %s at %s: %s", res.Method, res.URL, res.Timestamp.Format("15:04:05.000"), strings.TrimSpace(kind+" "+res.Error)))
	}
}

func classify(res *vegeta.Result) string {
	e := res.Error
	switch {
	case e == "":
		return "status " + strconv.Itoa(int(res.Code))
	case strings.Contains(e, "connection refused"):
		return "refused"
	case strings.Contains(e, "connection reset"):
		return "reset"
	case strings.Contains(e, "EOF"):
		return "EOF"
	case strings.Contains(e, "timeout") || strings.Contains(e, "deadline"):
		return "timeout"
	}
	return "error"
}

// result stops the load once every request sent has its answer.
type loadResult struct {
	Total, Failed, Resent int
	// LateFailed and LateResent (HTTP/1.1 only) count the failed and the
	// re-sent requests the client wrote on a connection whose server had
	// closed it before (finConn): counted in Failed and Resent, and
	// apart, since no server could have answered them.
	LateFailed, LateResent int
	// Repicked (gRPC only) counts calls grpc-go moved to another
	// connection before any byte of them left the client (see
	// retryCounter); it is logged, never asserted.
	Repicked int
	Kinds    map[string]int
	Examples []string
	// ResentAt is when each re-sent request was sent.
	ResentAt []time.Time
	// RefusedAt (HTTP/2 only) is when each request was sent that the
	// server refused with its GOAWAY, unprocessed, and the transport
	// re-sent on another connection: not counted in Resent.
	RefusedAt []time.Time
	// FailedAt is when each failed request was sent, in order of answer;
	// FailedAs how it failed (its kind and error), in the same order.
	FailedAt []time.Time
	FailedAs []string
	// Answered (a named load only) is the X-Request-Id of every request
	// answered 2xx.
	Answered map[string]bool
}

func (l *load) finish() loadResult {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadResult{Total: l.total, Failed: l.failed, Resent: int(l.resent.Load()),
		LateFailed: int(l.lateFailed.Load()), LateResent: int(l.lateResent.Load()), Answered: maps.Clone(l.answered), Kinds: l.kinds, Examples: slices.Clone(l.examples), ResentAt: slices.Clone(l.resentAt), RefusedAt: slices.Clone(l.refusedAt), FailedAt: slices.Clone(l.failedAt), FailedAs: slices.Clone(l.failedAs)}
}

func (r loadResult) String() string {
	var kinds []string
	for k, n := range r.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	s := fmt.Sprintf("%d requests, %d failed (%s), %d re-sent", r.Total, r.Failed, strings.Join(kinds, ", "), r.Resent)
	if len(r.RefusedAt) > 0 {
		s += fmt.Sprintf(" (and %d refused unprocessed by a server's HTTP/2 GOAWAY, then re-sent)", len(r.RefusedAt))
	}
	if r.LateFailed+r.LateResent > 0 {
		s += fmt.Sprintf(" (of them %d failed and %d re-sent after the client wrote them on a connection its server had already closed)", r.LateFailed, r.LateResent)
	}
	if r.Repicked > 0 {
		s += fmt.Sprintf(" (and %d moved to another connection before they left the client)", r.Repicked)
	}
	return s
}

package rollout

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Headers the L7 balancer adds to its answers, read by the load's recorder.
const (
	// hdrReplica names the replica that served (or failed) the request.
	hdrReplica = "X-Rollout-Replica"
	// hdrFailure carries the failure kind when the balancer answered 502
	// or 503 itself.
	hdrFailure = "X-Rollout-Failure"
)

// errNoEndpoint is returned when no replica is in rotation.
var errNoEndpoint = errors.New("no replica in rotation (no ready endpoint)")

// pick returns the next replica in rotation, round robin, or nil.
func (ro *rollout) pick() *replica {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	n := len(ro.replicas)
	for i := range n {
		r := ro.replicas[(ro.rr+i)%n]
		r.mu.Lock()
		in := r.inRotationLocked()
		r.mu.Unlock()
		if in {
			ro.rr = (ro.rr + i + 1) % n
			return r
		}
	}
	return nil
}

// replicaByID returns the replica with id, or nil.
func (ro *rollout) replicaByID(id int) *replica {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	for _, r := range ro.replicas {
		if r.id == id {
			return r
		}
	}
	return nil
}

// serveL7 is the L7 balancer, an ingress: it reads the client's request,
// picks a replica in rotation, and sends the request over its own
// keep-alive pool to that replica, once. A failure is answered 502 with
// the kind in X-Rollout-Failure; it is never retried on another replica.
func (ro *rollout) serveL7(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the client went away
	}
	r := ro.pick()
	if r == nil {
		w.Header().Set(hdrFailure, KindNoEndpoint)
		http.Error(w, errNoEndpoint.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set(hdrReplica, strconv.Itoa(r.id))
	resp, respBody, err := r.pool.roundTrip(req.Method, req.URL.RequestURI(), req.Header, body)
	if err != nil {
		w.Header().Set(hdrFailure, classify(err))
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range resp.Header {
		if !hopByHop[k] {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// hopByHop are the headers a proxy does not forward (RFC 9110, 7.6.1).
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
}

// pool is the L7 balancer's keep-alive pool to one replica: HTTP/1.1
// connections reused while the replica lets them be, and no retry of any
// kind (net/http's Transport would silently re-send an idempotent request
// whose reused connection was closed under it, which hides the very race
// this tool measures).
type pool struct {
	addr    string
	timeout time.Duration // per request, dial included

	mu     sync.Mutex // guards idle and closed
	idle   []*pconn
	closed bool
}

type pconn struct {
	c  net.Conn
	br *bufio.Reader
}

// roundTrip sends one request to the pool's replica and reads the whole
// answer.
func (p *pool) roundTrip(method, uri string, h http.Header, body []byte) (*http.Response, []byte, error) {
	deadline := time.Now().Add(p.timeout)
	pc, err := p.get(deadline)
	if err != nil {
		return nil, nil, err
	}
	_ = pc.c.SetDeadline(deadline)
	req, err := http.NewRequest(method, "http://"+p.addr+uri, bytes.NewReader(body))
	if err != nil {
		_ = pc.c.Close()
		return nil, nil, err
	}
	for k, vs := range h {
		if !hopByHop[k] {
			req.Header[k] = vs
		}
	}
	if err := req.Write(pc.c); err != nil {
		_ = pc.c.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(pc.br, req)
	if err != nil {
		_ = pc.c.Close()
		return nil, nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		_ = pc.c.Close()
		return nil, nil, err
	}
	if resp.Close {
		_ = pc.c.Close()
	} else {
		_ = pc.c.SetDeadline(time.Time{})
		p.put(pc)
	}
	return resp, respBody, nil
}

// get returns an idle connection, or dials a new one.
func (p *pool) get(deadline time.Time) (*pconn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pc, nil
	}
	p.mu.Unlock()
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &pconn{c: c, br: bufio.NewReader(c)}, nil
}

// put returns a connection to the pool, or closes it once the pool is.
func (p *pool) put(pc *pconn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = pc.c.Close()
		return
	}
	p.idle = append(p.idle, pc)
}

// close closes every idle connection; connections in use are closed when
// they are returned.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, pc := range p.idle {
		_ = pc.c.Close()
	}
	p.idle = nil
}

// pinnedConn is a client connection the L4 balancer pinned to a replica.
type pinnedConn struct {
	net.Conn
	replica int
}

// dialError is a failed L4 dial to a replica.
type dialError struct {
	replica int
	err     error
}

func (e *dialError) Error() string {
	return "replica " + strconv.Itoa(e.replica) + ": " + e.err.Error()
}
func (e *dialError) Unwrap() error { return e.err }

// dialL4 is the L4 balancer, kube-proxy: each new client connection goes to
// a replica in rotation, chosen when it is opened, and stays pinned to it
// for its whole life. A replica that refuses the connection refuses the
// client.
func (ro *rollout) dialL4(ctx context.Context, _, _ string) (net.Conn, error) {
	r := ro.pick()
	if r == nil {
		return nil, errNoEndpoint
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return nil, &dialError{r.id, err}
	}
	return &pinnedConn{Conn: c, replica: r.id}, nil
}

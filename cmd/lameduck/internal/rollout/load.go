package rollout

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Failure kinds, as the report names them (docs/rollout.md explains each
// one and its fix).
const (
	// KindStatus: the server answered, with a status outside 200–399.
	KindStatus = "status"
	// KindRefused: the replica refused the connection (its listener was
	// closed while it was still routed to).
	KindRefused = "refused"
	// KindReset: the connection was reset (RST) before the answer.
	KindReset = "reset"
	// KindEOF: the connection was closed (FIN) before the answer, typically
	// a keep-alive connection closed as the request was sent on it.
	KindEOF = "EOF"
	// KindTimeout: no answer within --timeout.
	KindTimeout = "timeout"
	// KindNoEndpoint: no replica was in rotation at all.
	KindNoEndpoint = "no-endpoint"
	// KindOther: any other error.
	KindOther = "other"
)

// Kinds lists the failure kinds in report order.
var Kinds = []string{KindStatus, KindRefused, KindReset, KindEOF, KindTimeout, KindNoEndpoint, KindOther}

// classify names the kind of a transport error.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, errNoEndpoint):
		return KindNoEndpoint
	case errors.Is(err, syscall.ECONNREFUSED):
		return KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return KindReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return KindEOF
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return KindTimeout
	}
	// net/http reports a keep-alive connection the server closed as text.
	switch s := err.Error(); {
	case strings.Contains(s, "server closed idle connection"), strings.Contains(s, "EOF"):
		return KindEOF
	case strings.Contains(s, "connection reset"), strings.Contains(s, "broken pipe"):
		return KindReset
	case strings.Contains(s, "connection refused"):
		return KindRefused
	}
	return KindOther
}

// sample is what the client saw of one request.
type sample struct {
	Seq     uint64
	Method  string
	At      time.Duration // sent, from the start of the rollout
	Latency time.Duration
	Code    int    // 0 without an answer
	Kind    string // "" for a success
	Error   string // the transport error or status line, for a failure
	Replica int    // 0 when unknown
	Resent  bool   // the client's transport sent it more than once
}

// recorder is the load's http.RoundTripper: it sends each request through
// next, reads the whole answer (so a connection cut mid-body is a failure of
// this request), and records a sample. Safe for concurrent use.
type recorder struct {
	next  http.RoundTripper
	since func() time.Duration
	// stopped is set just before the attacker is stopped: a request it
	// then cancels in flight ended because the load ended, not because a
	// replica failed it, and is not recorded.
	stopped atomic.Bool

	mu      sync.Mutex // guards samples
	samples []sample
}

func (rec *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	seq, _ := strconv.ParseUint(req.Header.Get("X-Vegeta-Seq"), 10, 64)
	var attempts atomic.Int32
	var pinned atomic.Int64
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		attempts.Add(1)
		if pc, ok := info.Conn.(*pinnedConn); ok {
			pinned.Store(int64(pc.replica))
		}
	}}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	s := sample{Seq: seq, Method: req.Method, At: rec.since()}
	resp, err := rec.next.RoundTrip(req)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	s.Latency = rec.since() - s.At
	s.Resent = attempts.Load() > 1
	s.Replica = int(pinned.Load())
	var de *dialError
	if errors.As(err, &de) {
		s.Replica = de.replica
	}
	switch {
	case err != nil && rec.stopped.Load() && errors.Is(err, context.Canceled):
		return resp, err // cancelled by the end of the load: no sample
	case err != nil:
		s.Kind, s.Error = classify(err), err.Error()
	default:
		s.Code = resp.StatusCode
		if id, _ := strconv.Atoi(resp.Header.Get(hdrReplica)); id > 0 {
			s.Replica = id
		}
		if k := resp.Header.Get(hdrFailure); k != "" {
			s.Kind, s.Error = k, strings.TrimSpace(string(peek(resp)))
		} else if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			s.Kind, s.Error = KindStatus, resp.Status
		}
	}
	rec.mu.Lock()
	rec.samples = append(rec.samples, s)
	rec.mu.Unlock()
	return resp, err
}

// peek returns the (already buffered) body of resp without consuming it.
func peek(resp *http.Response) []byte {
	b, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if len(b) > 200 {
		b = b[:200]
	}
	return b
}

// all returns the samples recorded so far, in the order they ended.
func (rec *recorder) all() []sample {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]sample(nil), rec.samples...)
}

// counts returns how many requests ended, and how many of them failed.
func (rec *recorder) counts() (n, failed int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range rec.samples {
		if s.Kind != "" {
			failed++
		}
	}
	return len(rec.samples), failed
}

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

	vegeta "github.com/tsenart/vegeta/v12/lib"
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

// targeter alternates GET requests to base+get and POST requests to
// base+post (a small JSON body); an empty path sends none of that method.
func targeter(base, get, post string) vegeta.Targeter {
	var mu sync.Mutex
	n := 0
	return func(t *vegeta.Target) error {
		mu.Lock()
		n++
		isPost := get == "" || (post != "" && n%2 == 0)
		mu.Unlock()
		t.Header = http.Header{}
		if isPost {
			t.Method, t.URL = http.MethodPost, base+post
			t.Body = []byte(`{"rollout":"lameduck"}`)
			t.Header.Set("Content-Type", "application/json")
		} else {
			t.Method, t.URL = http.MethodGet, base+get
		}
		return nil
	}
}

// load is the open-loop load of a run, local or on a cluster: vegeta's
// attacker sending rate requests per second through client (whose
// transport is the recorder rec), whatever the answers take, and a ticker
// that reports progress about four times a second.
type load struct {
	rec      *recorder
	attacker *vegeta.Attacker
	since    func() time.Duration
	report   func(requests, failed int)
	start    time.Duration

	metrics     vegeta.Metrics // written by the collecting goroutine until metricsDone
	metricsDone chan struct{}
	stopTicker  chan struct{}
	stopOnce    sync.Once
	end         time.Duration // set by the first stop
}

// startLoad starts the load now; goroutines it starts are counted in wg.
// report, when not nil, receives the requests ended so far and how many of
// them failed.
func startLoad(wg *sync.WaitGroup, rec *recorder, client *http.Client, tr vegeta.Targeter, rate int,
	since func() time.Duration, report func(requests, failed int)) *load {
	l := &load{rec: rec, since: since, report: report, start: since(),
		metricsDone: make(chan struct{}), stopTicker: make(chan struct{})}
	l.attacker = vegeta.NewAttacker(vegeta.Client(client), vegeta.MaxBody(-1))
	results := l.attacker.Attack(tr, vegeta.Rate{Freq: rate, Per: time.Second}, 0, "rollout")
	wg.Go(func() {
		defer close(l.metricsDone)
		for res := range results {
			l.metrics.Add(res)
		}
		l.metrics.Close()
	})
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.progress()
			case <-l.stopTicker:
				return
			}
		}
	})
	return l
}

// progress reports the counts so far.
func (l *load) progress() {
	if l.report != nil {
		n, failed := l.rec.counts()
		l.report(n, failed)
	}
}

// stop ends the load and returns every request's sample, vegeta's metrics,
// and when the load started and ended (offsets from the start of the run).
// A request in flight is cancelled and not counted. It waits until the
// attacker's last request has ended. Safe to call more than once: later
// calls return the same.
func (l *load) stop() ([]sample, *vegeta.Metrics, time.Duration, time.Duration) {
	l.stopOnce.Do(func() {
		l.rec.stopped.Store(true)
		l.attacker.Stop()
		l.end = l.since()
		<-l.metricsDone // the attacker closes results once its last request has ended
		close(l.stopTicker)
		l.progress()
	})
	return l.rec.all(), &l.metrics, l.start, l.end
}

package kube_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// load is open-loop traffic through a URL: rate requests a second whatever
// the server does (vegeta's constant pacer), alternating GET / and POST
// /echo, each on a connection of its own (as a client behind kube-proxy
// that does not keep connections alive: every request is a new routing
// decision), with a 10s timeout and no retries.
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
}

// countingTransport counts the connections each request takes: a request
// that took more than one was re-sent by the client's transport (net/http
// re-sends an idempotent request whose reused connection died), which a
// server that drains right must never cause.
type countingTransport struct {
	next http.RoundTripper
	l    *load
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	id := r.Header.Get("X-Load-Id")
	n := new(atomic.Int32)
	c.l.dials.Store(id, n)
	defer c.l.dials.Delete(id)
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		if n.Add(1) == 2 {
			c.l.resent.Add(1)
		}
	}}
	return c.next.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}

func startLoad(url string, rate int) *load {
	l := &load{kinds: map[string]int{}, done: make(chan struct{})}
	tr := &http.Transport{
		DisableKeepAlives:   true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig:     &tls.Config{},
		MaxIdleConnsPerHost: -1,
	}
	client := &http.Client{Transport: countingTransport{tr, l}, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var seq atomic.Int64
	targeter := func(t *vegeta.Target) error {
		n := seq.Add(1)
		t.Header = http.Header{"X-Load-Id": {strconv.FormatInt(n, 10)}}
		if n%2 == 0 {
			t.Method, t.URL, t.Body = http.MethodGet, url+"/", nil
		} else {
			t.Method, t.URL, t.Body = http.MethodPost, url+"/echo", []byte(`{"n":`+strconv.FormatInt(n, 10)+`}`)
			t.Header.Set("Content-Type", "application/json")
		}
		return nil
	}
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.MaxWorkers(4096))
	l.stop = func() { atk.Stop() }
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
	// Repicked (gRPC only) counts calls grpc-go moved to another
	// connection before any byte of them left the client (see
	// retryCounter); it is logged, never asserted.
	Repicked int
	Kinds    map[string]int
	Examples []string
	// FailedAt is when each failed request was sent, in order of answer;
	// FailedAs how it failed (its kind and error), in the same order.
	FailedAt []time.Time
	FailedAs []string
}

func (l *load) finish() loadResult {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadResult{Total: l.total, Failed: l.failed, Resent: int(l.resent.Load()), Kinds: l.kinds, Examples: slices.Clone(l.examples), FailedAt: slices.Clone(l.failedAt), FailedAs: slices.Clone(l.failedAs)}
}

func (r loadResult) String() string {
	var kinds []string
	for k, n := range r.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	s := fmt.Sprintf("%d requests, %d failed (%s), %d re-sent", r.Total, r.Failed, strings.Join(kinds, ", "), r.Resent)
	if r.Repicked > 0 {
		s += fmt.Sprintf(" (and %d moved to another connection before they left the client)", r.Repicked)
	}
	return s
}

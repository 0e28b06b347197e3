// Package rpcserve is what lameduck's RPC server integrations share:
// contrib/grpc (ldgrpc) and contrib/connect (ldconnect) answer the
// grpc.health.v1 service from the Lifecycle's own probes, wake their
// Watch streams, and end their server streams at the lame-duck window's
// end with the code here, so the two cannot come to disagree. It imports only the standard library and the
// core.
//
// It is internal: users read the behaviour in docs/grpc.md and
// docs/connect.md.
package rpcserve

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/lameduck/lameduck"
)

// ProbeOK reports whether lc's probe handler answers 200 to a HEAD request
// made under ctx: for its first liveness path when liveness is true
// (Config.LivenessPaths), for its readiness path otherwise
// (Config.ReadinessPath), as lc resolved them. The paths are the ones lc was configured with, not the
// defaults, so a gRPC health answer never disagrees with the HTTP probe
// the kubelet would make. A handler that writes a body without a status
// answers 200, as net/http would; a request that cannot be built answers
// false. The readiness question runs the readiness checks as a /readyz
// probe does, under ctx's deadline. It is safe for concurrent use.
func ProbeOK(ctx context.Context, lc *lameduck.Lifecycle, liveness bool) bool {
	cfg := lc.Config()
	path := cfg.ReadinessPath
	if liveness && len(cfg.LivenessPaths) > 0 {
		path = cfg.LivenessPaths[0]
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, path, nil)
	if err != nil {
		return false
	}
	w := &codeOnly{}
	lc.ProbeHandler().ServeHTTP(w, req)
	return w.code == 0 || w.code == http.StatusOK
}

// codeOnly is an http.ResponseWriter that keeps the status code alone.
type codeOnly struct {
	hdr  http.Header
	code int
}

func (w *codeOnly) Header() http.Header {
	if w.hdr == nil {
		w.hdr = http.Header{}
	}
	return w.hdr
}

func (w *codeOnly) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(b), nil
}

func (w *codeOnly) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// errDrained is the cause of a stream context cancelled at the window's end.
var errDrained = errors.New("lameduck: the lame-duck window ended")

// UntilWindowEnd calls stream, a server-streaming or bidirectional call's
// handler, with a context derived from ctx that is also cancelled when lc's
// lame-duck window ends (Events().WindowEnded; its context.Cause is then
// an error saying so). It returns stream's error, or, when the window's end
// cancelled the context, ended's, whatever stream returned: the client is
// told to go elsewhere (codes.Unavailable in both integrations). The
// goroutine that watches the window has returned when UntilWindowEnd does.
func UntilWindowEnd(ctx context.Context, lc *lameduck.Lifecycle, stream func(context.Context) error, ended func() error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	drain := lc.Events().WindowEnded.Done()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()   // runs second: the watcher has left
	defer close(stop) // runs first
	wg.Go(func() {
		select {
		case <-drain:
			cancel(errDrained)
		case <-stop:
		}
	})
	err := stream(ctx)
	if errors.Is(context.Cause(ctx), errDrained) {
		return ended()
	}
	return err
}

// Marks is what a health service's SetServing was told: the services named
// to it, each marked serving or not, and a channel closed and replaced on
// each call, which wakes the Watch streams. The zero value is not usable;
// use [NewMarks]. Its methods are safe for concurrent use.
type Marks struct {
	mu      sync.Mutex
	down    map[string]bool // guarded by mu: true while marked not serving
	changed chan struct{}   // guarded by mu: closed and replaced on each Set
}

// NewMarks returns a Marks that knows no service.
func NewMarks() *Marks {
	return &Marks{down: map[string]bool{}, changed: make(chan struct{})}
}

// Set names service and marks it serving or not, and closes the channel
// Lookup returned until now.
func (m *Marks) Set(service string, serving bool) {
	m.mu.Lock()
	m.down[service] = !serving
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

// Lookup reports whether service was named by Set and whether it is marked
// not serving, and returns the channel the next Set closes.
func (m *Marks) Lookup(service string) (known, down bool, changed <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.down[service]
	return ok, d, m.changed
}

// Names returns every service named by Set, in no particular order.
func (m *Marks) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.down))
}

// Wakes tells a Watch stream when to re-read its service's status: at the
// end of the Lifecycle's boot (Events.StartupDone), at the shutdown signal
// (Events.ShutdownInitiated), on each Marks.Set, and every period between.
// Make one with [Marks.Wakes] per stream; it is not safe for concurrent
// use.
type Wakes struct {
	marks             *Marks
	service           string
	booted, signalled <-chan struct{} // nil once fired
	tick              *time.Ticker
}

// Wakes returns the Wakes of a Watch stream of service on lc, re-reading
// every period (> 0) besides the events. Call Stop when the stream ends.
func (m *Marks) Wakes(lc *lameduck.Lifecycle, service string, period time.Duration) *Wakes {
	ev := lc.Events()
	return &Wakes{marks: m, service: service, booted: ev.StartupDone.Done(), signalled: ev.ShutdownInitiated.Done(),
		tick: time.NewTicker(period)}
}

// Next blocks until the stream should re-read its status, and returns
// true; or until done is closed, and returns false. The boot's end and the
// signal each wake it once.
func (w *Wakes) Next(done <-chan struct{}) bool {
	_, _, changed := w.marks.Lookup(w.service)
	select {
	case <-done:
		return false
	case <-w.booted:
		w.booted = nil
	case <-w.signalled:
		w.signalled = nil
	case <-changed:
	case <-w.tick.C:
	}
	return true
}

// Stop stops the periodic re-read.
func (w *Wakes) Stop() { w.tick.Stop() }

// Package rollout runs a command through simulated Kubernetes rolling
// restarts under load and counts every request that failed: the engine of
// `lameduck rollout` (docs/rollout.md).
//
// It starts Replicas copies of the command on loopback ports, puts a load
// balancer in front of them that polls each one's readiness path the way
// the kubelet runs a readinessProbe, and sends open-loop load through it
// with vegeta's attacker. Each rolling restart starts one surge replica,
// waits until it is in rotation, then does to an old one what deleting a
// pod does: SIGTERM at once and, in parallel and unsynchronised, removal
// from the balancer after a delay drawn from a range (the endpoints
// controller and kube-proxy catching up, 1–10s in a real cluster; see
// https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination).
// A server that stops accepting before the balancer has forgotten it
// fails requests; one with a lame-duck window longer than the removal
// delay fails none.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/cmd/lameduck/internal/ctxtime"
)

// Balancer modes.
const (
	// ModeL7 is an ingress: it terminates the client's HTTP connection and
	// sends each request to a replica in rotation over its own keep-alive
	// pool, without retrying a failed one.
	ModeL7 = "l7"
	// ModeL4 is kube-proxy: each client connection is pinned to the
	// replica in rotation when it was opened, for its whole life.
	ModeL4 = "l4"
)

// Load is the load a rollout sends and how many rounds of restarts it
// sends it through: the options Run and RunKube share. Every field has the
// default given by the `lameduck rollout` flag of the same name.
type Load struct {
	// Rounds is the rolling restarts: of every replica (Run), of the
	// Deployment (RunKube); ≥ 1.
	Rounds   int
	Rate     int    // requests per second, open loop; ≥ 1
	GetPath  string // the path of GET requests; "" sends none
	PostPath string // the path of POST requests; "" sends none
	// Timeout bounds each request of the load.
	Timeout time.Duration
	// Warmup and Cooldown are load before the first restart and after the
	// last: after the last old replica exited (Run), after the last round
	// is complete (RunKube).
	Warmup, Cooldown time.Duration
}

// Options configures a rollout. Durations are time.Duration; every field
// has the default given by the `lameduck rollout` flag of the same name.
type Options struct {
	Load

	// Command is the command of one replica. Each replica gets its own
	// loopback port in its environment as PORT, and "{port}" in any
	// argument is replaced by it: a command that reads PORT needs no
	// {port}.
	Command []string
	// Env is added to every replica's environment ("KEY=value").
	Env []string

	Replicas int    // replicas kept serving; ≥ 1
	Mode     string // ModeL7 or ModeL4

	ProbePath     string        // the readiness path polled; default /readyz
	ProbePeriod   time.Duration // between polls of one replica
	ProbeFailures int           // consecutive failures that take a replica out
	ProbeTimeout  time.Duration // per poll

	// RemovalMin and RemovalMax bound the delay after SIGTERM at which the
	// balancer forgets a replica, drawn uniformly for each replica.
	RemovalMin, RemovalMax time.Duration
	// Grace is terminationGracePeriodSeconds: SIGKILL after it.
	Grace time.Duration
	// StopTimeout bounds the drain of the replicas still running when the
	// run ends (the last set, or every replica when the run is
	// interrupted or fails): they get SIGTERM, and SIGKILL only if they
	// are still running this long after it. The command's default is
	// Grace.
	StopTimeout time.Duration
	// StartTimeout bounds the wait for a new replica to be in rotation.
	StartTimeout time.Duration
	// Rand is where the random removal delays start from, so a run can be
	// repeated; 0 picks one at random.
	Rand uint64
	// LogDir keeps each replica's output in LogDir/replica-N.log; "" uses a
	// temporary directory removed at the end.
	LogDir string

	// Progress, when set, is called about four times a second and at each
	// step with the restarts done, the total, and the requests and failures
	// so far.
	Progress func(done, total, requests, failed int)
	// Warn receives problems that do not stop the rollout. Default: none.
	Warn func(string)
}

// Validate reports the first option that cannot work, naming the flag.
func (o *Options) Validate() error {
	switch {
	case len(o.Command) == 0:
		return errors.New("no command: write it after --, such as: lameduck rollout -- lameduck demo --addr 127.0.0.1:{port}")
	case o.Replicas < 1:
		return fmt.Errorf("--replicas=%d: must be at least 1", o.Replicas)
	case o.Rounds < 1:
		return fmt.Errorf("--rounds=%d: must be at least 1", o.Rounds)
	case o.Mode != ModeL7 && o.Mode != ModeL4:
		return fmt.Errorf("--mode=%q: use l7 (an ingress) or l4 (kube-proxy)", o.Mode)
	case o.Rate < 1:
		return fmt.Errorf("--rate=%d: must be at least 1 request per second", o.Rate)
	case o.GetPath == "" && o.PostPath == "":
		return errors.New("--get and --post are both empty: no load to send")
	case o.ProbePeriod <= 0 || o.ProbeTimeout <= 0 || o.ProbeFailures < 1:
		return errors.New("--probe-period and --probe-timeout must be positive, --probe-failures at least 1")
	case o.RemovalMin < 0 || o.RemovalMax < o.RemovalMin:
		return fmt.Errorf("--removal-delay=%s-%s: must be MIN-MAX with 0 ≤ MIN ≤ MAX, such as 1s-3s", o.RemovalMin, o.RemovalMax)
	case o.Grace <= 0 || o.StartTimeout <= 0 || o.Timeout <= 0:
		return errors.New("--grace, --start-timeout and --timeout must be positive")
	case o.StopTimeout <= 0:
		return fmt.Errorf("--stop-timeout=%s: must be positive, such as 45s (the replicas left at the end get SIGTERM and this long to exit)", o.StopTimeout)
	case o.Warmup < 0 || o.Cooldown < 0:
		return errors.New("--warmup and --cooldown must not be negative")
	}
	return nil
}

// upstreamTimeout is the L7 balancer's per-request bound, a little under
// the client's, so that the balancer, not the client, reports a timeout.
func (o *Options) upstreamTimeout() time.Duration { return o.Timeout * 9 / 10 }

// rollout is one run.
type rollout struct {
	opt    Options
	ctx    context.Context
	start  time.Time
	logDir string
	rnd    *rand.Rand // guarded by mu
	warn   func(string)

	wg sync.WaitGroup // every goroutine the run starts

	mu        sync.Mutex // guards the fields below and rnd
	replicas  []*replica // every replica started, alive or not
	nextID    int
	usedPorts map[int]bool
	rr        int // round-robin position
}

func (ro *rollout) since() time.Duration { return time.Since(ro.start) }

func (ro *rollout) warnf(format string, args ...any) {
	if ro.warn != nil {
		ro.warn(fmt.Sprintf(format, args...))
	}
}

// removalDelay draws the endpoint-removal delay of one terminated replica.
func (ro *rollout) removalDelay() time.Duration {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	span := ro.opt.RemovalMax - ro.opt.RemovalMin
	if span <= 0 {
		return ro.opt.RemovalMin
	}
	return ro.opt.RemovalMin + time.Duration(ro.rnd.Int64N(int64(span)+1))
}

// ErrSetup wraps every error of Run that happened before or outside the
// load: the command could not start, a replica never became ready. The
// command exits 2 on it.
var ErrSetup = errors.New("rollout could not run")

// setupError wraps err in ErrSetup, unless the run was interrupted (ctx
// ended), which is not a setup problem.
func setupError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %w", ErrSetup, err)
}

// Run performs the rollout and returns its report. It returns an error
// wrapping ErrSetup when the replicas could not be started or a surge
// replica never became ready (the report is then nil), and ctx's error if
// ctx ended first. Failed requests are not an error: they are in the
// report. Every process it started has exited when it returns.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if err := opt.Validate(); err != nil {
		return nil, setupError(ctx, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ro := &rollout{opt: opt, ctx: ctx, start: time.Now(), usedPorts: map[int]bool{}, warn: opt.Warn}
	rand0 := opt.Rand
	if rand0 == 0 {
		rand0 = rand.Uint64()
	}
	ro.rnd = rand.New(rand.NewPCG(rand0, rand0))
	ro.logDir = opt.LogDir
	if ro.logDir == "" {
		dir, err := os.MkdirTemp("", "lameduck-rollout-")
		if err != nil {
			return nil, setupError(ctx, err)
		}
		defer os.RemoveAll(dir)
		ro.logDir = dir
	} else if err := os.MkdirAll(ro.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: --logs: %w", ErrSetup, err)
	}
	// Every replica is stopped and every goroutine joined on the way out,
	// whatever happened.
	defer func() {
		ro.stopAll()
		cancel()
		ro.wg.Wait()
	}()

	// The balancer's front.
	var client *http.Client
	var target string
	rec := &recorder{since: ro.since}
	switch opt.Mode {
	case ModeL7:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, setupError(ctx, err)
		}
		front := &http.Server{Handler: http.HandlerFunc(ro.serveL7), ReadHeaderTimeout: 10 * time.Second}
		ro.wg.Go(func() { _ = front.Serve(ln) })
		defer front.Close()
		target = "http://" + ln.Addr().String()
		rec.next = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 10000, DisableCompression: true}
	case ModeL4:
		target = "http://service.rollout.invalid"
		rec.next = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 10000, DisableCompression: true, DialContext: ro.dialL4}
	}
	client = &http.Client{Transport: rec, Timeout: opt.Timeout}
	defer rec.next.(*http.Transport).CloseIdleConnections()

	// The first set, all ready before any load.
	current := make([]*replica, 0, opt.Replicas)
	for range opt.Replicas {
		r, err := ro.startReplica(0)
		if err != nil {
			return nil, setupError(ctx, err)
		}
		current = append(current, r)
	}
	for i, r := range current {
		ready, err := ro.waitReady(ctx, r)
		if err != nil {
			return nil, setupError(ctx, err)
		}
		current[i] = ready
	}

	// Open-loop load for the whole rollout.
	total := opt.Rounds * opt.Replicas
	var done atomic.Int64 // restarts done; read by the progress ticker
	ld := startLoad(&ro.wg, rec, client, targeter(target, opt.GetPath, opt.PostPath), opt.Rate, ro.since,
		func(n, failed int) {
			if opt.Progress != nil {
				opt.Progress(int(done.Load()), total, n, failed)
			}
		})
	defer ld.stop()

	if err := ctxtime.Sleep(ctx, opt.Warmup); err != nil {
		return nil, err
	}
	var terminated []*replica
	for round := 1; round <= opt.Rounds; round++ {
		for i, old := range current {
			surge, err := ro.startReplica(round)
			if err != nil {
				return nil, setupError(ctx, err)
			}
			if surge, err = ro.waitReady(ctx, surge); err != nil {
				return nil, setupError(ctx, err)
			}
			ro.terminate(old)
			terminated = append(terminated, old)
			current[i] = surge
			done.Add(1)
			ld.progress()
		}
	}
	// The load goes on until every terminated replica has exited and the
	// balancer has forgotten it: a replica that exits before its endpoint
	// is removed is still routed to, and that is what the run measures.
	for _, r := range terminated {
		select {
		case <-r.exited:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		<-r.removedCh
	}
	if err := ctxtime.Sleep(ctx, opt.Cooldown); err != nil {
		return nil, err
	}
	samples, metrics, loadStart, loadEnd := ld.stop()

	ro.stopAll()
	return ro.report(samples, metrics, rand0, loadStart, loadEnd), nil
}

// stopAll takes every replica out of rotation and ends those still
// running, the way a service is stopped, never at once: the ones the
// rollout terminated get the rest of their grace period (then SIGKILL);
// the others (the last set, whose measurement is done, or every replica
// of a run that failed or was interrupted) get SIGTERM now and
// StopTimeout to drain and exit by themselves, then SIGKILL. It returns
// once every replica has exited.
func (ro *rollout) stopAll() {
	ro.mu.Lock()
	all := slices.Clone(ro.replicas)
	ro.mu.Unlock()
	for _, r := range all {
		r.mu.Lock()
		r.removed = true
		r.mu.Unlock()
		if _, ok := r.firstAt(evSigterm); !ok {
			ro.stop(r)
		}
	}
	for _, r := range all {
		<-r.exited // terminate's and stop's own timers SIGKILL at their bound
	}
}

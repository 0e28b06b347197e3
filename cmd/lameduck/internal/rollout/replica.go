package rollout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// replica is one copy of the command under test: a child process on its own
// loopback port, probed like a pod by the kubelet.
type replica struct {
	id    int    // 1, 2, … in start order
	round int    // the rolling restart that started it; 0 for the first set
	port  int    // the port substituted for {port}
	addr  string // "127.0.0.1:port"
	cmd   *exec.Cmd
	log   string // the path of its combined stdout and stderr
	pool  *pool  // the L7 balancer's keep-alive connections to it

	exited    chan struct{} // closed when the process has exited
	removedCh chan struct{} // closed when terminate's endpoint-removal delay has passed (or the run ended)

	mu       sync.Mutex // guards the fields below
	ready    bool       // the readiness poller's verdict (failure threshold applied)
	removed  bool       // the endpoint-removal delay has passed after SIGTERM
	events   []event    // the replica's timeline
	exitCode int        // valid once exited is closed; -1 for a signal
	killed   bool       // SIGKILLed at the grace period
	requests int        // requests routed to it (as the client saw them)
	failed   int        // of which failed
}

// event is one step of a replica's life, at an offset from the start of the
// rollout.
type event struct {
	At   time.Duration
	What string // one of the ev* constants
}

const (
	evStarted = "started"
	evIn      = "in rotation" // the balancer routes to it
	evOut     = "out of rotation"
	evSigterm = "SIGTERM"
	evRemoved = "endpoint removed"
	evExited  = "exited"
	evKilled  = "SIGKILL"
	evStop    = "SIGTERM at the end" // stopAll's SIGTERM to a replica the rollout did not terminate
)

// inRotation reports whether the balancer may route a new request (L7) or
// a new connection (L4) to r.
func (r *replica) inRotationLocked() bool { return r.ready && !r.removed }

// firstAt returns the offset of r's first event named what, and whether it
// happened.
func (r *replica) firstAt(what string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.What == what {
			return e.At, true
		}
	}
	return 0, false
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the replica binds it: waitReady then starts the replica
// again on another port.
func freePort(used map[int]bool) (int, error) {
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !used[port] {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port found")
}

// expandArgs replaces {port} in every argument.
func expandArgs(args []string, port int) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "{port}", strconv.Itoa(port))
	}
	return out
}

// pickPort is freePort; tests replace it to hand out a port that is taken.
var pickPort = freePort

// portAttempts is how many ports a replica is started on, each time another
// process took the port before the replica could bind it.
const portAttempts = 5

// startReplica starts the command for a new replica of round on a free
// port, with its output in a file under logDir. The process gets env on
// top of this process's environment, plus PORT.
func (ro *rollout) startReplica(round int) (*replica, error) {
	ro.mu.Lock()
	ro.nextID++
	id := ro.nextID
	ro.mu.Unlock()
	return ro.spawn(id, round)
}

// spawn starts replica id of round on a free port.
func (ro *rollout) spawn(id, round int) (*replica, error) {
	ro.mu.Lock()
	port, err := pickPort(ro.usedPorts)
	if err == nil {
		ro.usedPorts[port] = true
	}
	ro.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("lameduck rollout: replica %d: %w", id, err)
	}
	args := expandArgs(ro.opt.Command, port)
	logPath := filepath.Join(ro.logDir, fmt.Sprintf("replica-%d.log", id))
	out, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("lameduck rollout: replica %d: %w", id, err)
	}
	defer out.Close() // the child holds its own copy
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), ro.opt.Env...)
	cmd.Env = append(cmd.Env, "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = out, out
	r := &replica{
		id: id, round: round, port: port, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		cmd: cmd, log: logPath, exited: make(chan struct{}), removedCh: make(chan struct{}),
	}
	r.pool = &pool{addr: r.addr, timeout: ro.opt.upstreamTimeout()}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lameduck rollout: start %q: %w", strings.Join(args, " "), err)
	}
	r.mark(ro.since(), evStarted)
	ro.mu.Lock()
	ro.replicas = append(ro.replicas, r)
	// In id order, the report's: a replica started again (waitReady)
	// keeps its id.
	slices.SortStableFunc(ro.replicas, func(a, b *replica) int { return a.id - b.id })
	ro.mu.Unlock()

	ro.wg.Go(func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode() // -1 when a signal ended it
		}
		r.mu.Lock()
		r.exitCode = code
		r.events = append(r.events, event{ro.since(), evExited})
		r.mu.Unlock()
		close(r.exited)
		r.pool.close()
	})
	ro.wg.Go(func() { ro.probe(r) })
	return r, nil
}

// mark appends an event to r's timeline.
func (r *replica) mark(at time.Duration, what string) {
	r.mu.Lock()
	r.events = append(r.events, event{at, what})
	r.mu.Unlock()
}

// probe polls r's readiness path every ProbePeriod, the way the kubelet runs
// a readinessProbe (successThreshold 1, failureThreshold ProbeFailures, a
// new connection each time), and moves r in and out of rotation. It returns
// when r has exited or the rollout is over.
func (ro *rollout) probe(r *replica) {
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		Timeout:   ro.opt.ProbeTimeout,
	}
	defer client.CloseIdleConnections()
	url := "http://" + r.addr + ro.opt.ProbePath
	tick := time.NewTicker(ro.opt.ProbePeriod)
	defer tick.Stop()
	failures := 0
	for {
		ok := false
		req, err := http.NewRequestWithContext(ro.ctx, http.MethodGet, url, nil)
		if err == nil {
			if resp, err := client.Do(req); err == nil {
				_ = resp.Body.Close()
				ok = resp.StatusCode >= 200 && resp.StatusCode < 400 // the kubelet's rule for httpGet
			}
		}
		if ok {
			failures = 0
			ro.setReady(r, true)
		} else if failures++; failures >= ro.opt.ProbeFailures {
			ro.setReady(r, false)
		}
		r.mu.Lock()
		removed := r.removed
		r.mu.Unlock()
		if removed {
			return // out of the endpoints for good: nobody probes it any more
		}
		select {
		case <-tick.C:
		case <-ro.ctx.Done():
			return
		}
	}
}

// setReady records the readiness verdict and the rotation change it makes.
func (ro *rollout) setReady(r *replica, ready bool) {
	r.mu.Lock()
	before := r.inRotationLocked()
	r.ready = ready
	ro.noteRotationLocked(r, before)
	r.mu.Unlock()
}

// noteRotationLocked logs a change of r's rotation since before.
func (ro *rollout) noteRotationLocked(r *replica, before bool) {
	switch now := r.inRotationLocked(); {
	case now && !before:
		r.events = append(r.events, event{ro.since(), evIn})
	case !now && before:
		r.events = append(r.events, event{ro.since(), evOut})
	}
}

// terminate does what deleting a pod does: SIGTERM now, and in parallel,
// unsynchronised, endpoint removal after a delay drawn from the removal
// range; SIGKILL if the process is still running after the grace period.
// It does not wait.
func (ro *rollout) terminate(r *replica) {
	delay := ro.removalDelay()
	ro.sigterm(r, evSigterm)
	ro.wg.Go(func() {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ro.ctx.Done():
		}
		r.mu.Lock()
		before := r.inRotationLocked()
		r.removed = true
		r.events = append(r.events, event{ro.since(), evRemoved})
		ro.noteRotationLocked(r, before)
		r.mu.Unlock()
		close(r.removedCh)
	})
	ro.killAfter(r, ro.opt.Grace, nil)
}

// stop ends a replica the rollout is done with: SIGTERM now, and SIGKILL
// if it is still running StopTimeout later. It does not wait.
func (ro *rollout) stop(r *replica) {
	select {
	case <-r.exited:
		return
	default:
	}
	ro.sigterm(r, evStop)
	ro.killAfter(r, ro.opt.StopTimeout, func() {
		ro.warnf("replica %d: still running %s after its SIGTERM at the end of the run (--stop-timeout): SIGKILL", r.id, ro.opt.StopTimeout)
	})
}

// sigterm marks r with what (evSigterm, evStop) and sends it SIGTERM,
// warning when that fails for another reason than its having exited.
func (ro *rollout) sigterm(r *replica, what string) {
	r.mark(ro.since(), what)
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		ro.warnf("replica %d: SIGTERM: %v", r.id, err)
	}
}

// killAfter SIGKILLs r, marked killed (evKilled), if it is still running
// d from now; warn, when not nil, is called just before the kill. It does
// not wait: ro.wg joins the goroutine that waits.
func (ro *rollout) killAfter(r *replica, d time.Duration, warn func()) {
	ro.wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-r.exited:
		case <-t.C:
			r.mu.Lock()
			r.killed = true
			r.events = append(r.events, event{ro.since(), evKilled})
			r.mu.Unlock()
			if warn != nil {
				warn()
			}
			_ = r.cmd.Process.Kill()
		}
	})
}

// portTakenError is a replica's exit before it was ready with "address
// already in use" in its output: another process bound its port between
// freePort's check and the replica's own bind (or the command does not
// listen on {port}).
type portTakenError struct{ error }

func (e portTakenError) Unwrap() error { return e.error }

// waitReady waits until r is in rotation and returns it. When r exits
// before that because its port was taken (its output says "address already
// in use", as Go, C, Python, Node.js and Java servers all do), it starts r
// again, with the same id, on another port, at most portAttempts times in
// all, and returns the replica that became ready. It fails when r exits
// otherwise, the start timeout passes or ctx ends.
func (ro *rollout) waitReady(ctx context.Context, r *replica) (*replica, error) {
	for attempt := 1; ; attempt++ {
		err := ro.waitReadyOnce(ctx, r)
		if err == nil {
			return r, nil
		}
		var taken portTakenError
		if !errors.As(err, &taken) {
			return nil, err
		}
		if attempt == portAttempts {
			return nil, fmt.Errorf("%w\n(%d ports in a row were in use: does the command listen on {port} or $PORT?)", err, portAttempts)
		}
		ro.warnf("replica %d: another process took port %d before the replica could bind it; starting it again on another port", r.id, r.port)
		ro.forget(r)
		if r, err = ro.spawn(r.id, r.round); err != nil {
			return nil, err
		}
	}
}

// forget drops r, which exited before it was ready, from the run: the
// report does not list it (the replica started again in its place has its
// id) and its readiness poller stops.
func (ro *rollout) forget(r *replica) {
	ro.mu.Lock()
	ro.replicas = slices.DeleteFunc(ro.replicas, func(x *replica) bool { return x == r })
	ro.mu.Unlock()
	r.mu.Lock()
	r.removed = true
	r.mu.Unlock()
}

// waitReadyOnce waits until r is in rotation, r exits, the timeout passes
// or ctx ends. A replica that has exited is not ready, whatever answers on
// its port.
func (ro *rollout) waitReadyOnce(ctx context.Context, r *replica) error {
	deadline := time.NewTimer(ro.opt.StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	exited := func() error {
		err := fmt.Errorf("lameduck rollout: replica %d (%s) exited with code %d before it was ready%s",
			r.id, strings.Join(r.cmd.Args, " "), r.exitCode, logTail(r.log))
		if b, _ := os.ReadFile(r.log); bytes.Contains(bytes.ToLower(b), []byte("address already in use")) {
			err = portTakenError{err}
		}
		return err
	}
	for {
		r.mu.Lock()
		in := r.inRotationLocked()
		r.mu.Unlock()
		select {
		case <-r.exited:
			return exited()
		default:
			if in {
				return nil
			}
		}
		select {
		case <-tick.C:
		case <-r.exited:
			return exited()
		case <-deadline.C:
			return fmt.Errorf("lameduck rollout: replica %d (%s) not ready on %s%s within --start-timeout %s; does the command listen on {port} or $PORT, and does it serve %s?%s",
				r.id, strings.Join(r.cmd.Args, " "), r.addr, ro.opt.ProbePath, ro.opt.StartTimeout, ro.opt.ProbePath, logTail(r.log))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// logTail returns the last lines of a replica's output, for an error.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return "; its last output:\n\t" + strings.Join(lines, "\n\t")
}

package lameduck

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signals are the signals that start the shutdown sequence: SIGTERM, what
// the kubelet sends (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle,
// "Termination of Pods"), and SIGINT, Ctrl-C at a terminal.
func signals() []os.Signal { return []os.Signal{syscall.SIGTERM, os.Interrupt} }

// exitCode returns 128 + the signal's number, the shell's convention for a
// process ended by a signal, or 1 for a signal without a number.
func exitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// onSignal handles every signal after Run installed its handler.
func (l *Lifecycle) onSignal(sig os.Signal) {
	if l.begin("signal "+sigName(sig), true) {
		return
	}
	l.mu.Lock()
	bySignal, reason := l.bySignal, l.reason
	l.bySignal = true // any later signal is a second signal
	l.mu.Unlock()
	switch {
	case !bySignal && reason == reasonPreStop:
		l.log.Info("lameduck: "+sigName(sig)+" after the preStop hook: the sequence is already running; no second window",
			"phase", l.Phase().String())
	case bySignal && l.cfg.ExitOnSecondSignal:
		l.log.Error("lameduck: second "+sigName(sig)+": exiting now without finishing the drain",
			"setting", l.cfg.EnvPrefix+"EXIT_ON_SECOND_SIGNAL=true", "in_flight", l.track.inflight())
		l.exit(exitCode(sig))
	default:
		l.log.Warn("lameduck: "+sigName(sig)+" ignored: the shutdown sequence runs to completion",
			"phase", l.Phase().String(), "started_by", reason,
			"hint", "set "+l.cfg.EnvPrefix+"EXIT_ON_SECOND_SIGNAL=true to exit on a second signal")
	}
}

func sigName(sig os.Signal) string {
	if s, ok := sig.(interface{ String() string }); ok {
		switch s.String() {
		case "terminated":
			return "SIGTERM"
		case "interrupt":
			return "SIGINT"
		}
		return s.String()
	}
	return fmt.Sprint(sig)
}

// watchSignals hands SIGTERM and SIGINT to onSignal until the returned stop is
// called, which waits for the goroutine doing it. It is installed before
// anything is bound: a SIGTERM that comes the instant the port answers must
// start the sequence, not kill the process.
func (l *Lifecycle) watchSignals() (stop func()) {
	var wg sync.WaitGroup
	stopSignals := make(chan struct{})
	if !l.cfg.IgnoreSignals {
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, signals()...)
		wg.Go(func() {
			defer signal.Stop(sigs)
			for {
				select {
				case sig := <-sigs:
					l.onSignal(sig)
				case <-stopSignals:
					return
				}
			}
		})
	}
	return func() { close(stopSignals); wg.Wait() }
}

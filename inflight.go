package lameduck

// CountInFlight installs fn, which counts the work in flight that is not an
// HTTP request: a runner's jobs (the worker package installs one). The
// shutdown sequence's log lines ("draining", "teardown") add its count to
// their in_flight, so a runner busy with a job does not log in_flight=0.
// It changes no drain: only the log. There is one such function per
// Lifecycle: a second call replaces the first. fn is called from the
// sequence's goroutine and must only read memory and return at once. It
// returns ErrAlreadyRunning once Run has started. Safe for concurrent use.
func (l *Lifecycle) CountInFlight(fn func() int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return ErrAlreadyRunning
	}
	l.countWork.Store(&fn)
	return nil
}

// inFlight is the in_flight of the sequence's log lines: the HTTP requests
// in flight plus what CountInFlight's function counts.
func (l *Lifecycle) inFlight() int64 {
	n := l.track.inflight()
	if fn := l.countWork.Load(); fn != nil && *fn != nil {
		n += int64((*fn)())
	}
	return n
}

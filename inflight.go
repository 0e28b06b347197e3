package lameduck

// inFlight is the in_flight of the sequence's log lines: the HTTP requests
// in flight plus the work an extension counts (a runner's jobs), so a
// runner busy with a job does not log in_flight=0.
func (l *Lifecycle) inFlight() int64 {
	n := l.track.inflight()
	if l.cfg.Extension != nil && l.cfg.Extension.InFlight != nil {
		n += int64(l.cfg.Extension.InFlight())
	}
	return n
}

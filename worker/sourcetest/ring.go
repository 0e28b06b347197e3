package sourcetest

import (
	"strconv"
	"strings"
	"sync"
)

// ring keeps the last lines written to it: the runners' logs, shown when a
// scenario fails. It is safe for concurrent use.
type ring struct {
	mu    sync.Mutex
	lines []string // guarded by mu
	next  int      // guarded by mu: where the next line goes once full
	size  int
	total int // guarded by mu: lines written
}

func newRing(size int) *ring { return &ring{size: size} }

// Write keeps p's lines; it never fails.
func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		r.total++
		if len(r.lines) < r.size {
			r.lines = append(r.lines, l)
			continue
		}
		r.lines[r.next] = l
		r.next = (r.next + 1) % r.size
	}
	return len(p), nil
}

// String returns the lines kept, oldest first.
func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append(append([]string(nil), r.lines[r.next:]...), r.lines[:r.next]...)
	s := strings.Join(out, "\n")
	if dropped := r.total - len(out); dropped > 0 {
		s = "… " + strconv.Itoa(dropped) + " earlier line(s) dropped\n" + s
	}
	return s
}

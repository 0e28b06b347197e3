package testsupport

import (
	"bytes"
	"sync"
)

// LogBuffer is a goroutine-safe sink for a test's slog handler: the code
// under test writes from its own goroutines while the test reads String.
// Its zero value is empty and ready to use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

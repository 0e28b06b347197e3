package testsupport

import (
	"bytes"
	"sync"
	"testing"
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

// LogOnFailure registers a cleanup on t that logs everything written, when
// t has failed.
func (l *LogBuffer) LogOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", l)
		}
	})
}

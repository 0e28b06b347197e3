package testsupport

import (
	"testing"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/lameducktest"
)

// NewLifecycle returns a Lifecycle made by lameduck.New from cfg as
// lameducktest.Configure sets it up (a fresh fake clock, no signals, no
// environment unless cfg reads one, a logger writing to t unless cfg has
// one), and that clock. It fails t when New refuses cfg. It is the tests'
// shorthand for the three lines a user writes.
func NewLifecycle(t testing.TB, cfg lameduck.Config) (*lameduck.Lifecycle, *lameducktest.Clock) {
	t.Helper()
	clk := lameducktest.Configure(t, &cfg)
	lc, err := lameduck.New(cfg)
	if err != nil {
		t.Fatalf("lameduck.New: %v", err)
	}
	return lc, clk
}

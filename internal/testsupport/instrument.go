package testsupport

import (
	"testing"

	"github.com/lameduck/lameduck"
)

// InstrumentRefusals holds what every Instrument(&cfg, sink) of a metrics
// integration refuses: a nil Config is an error (the call given sink, a
// working one), and so is a nil sink (what names its type), which leaves
// the Config's OnTransition unset. It returns that refused Config, for the
// caller's further refusals.
func InstrumentRefusals[S any](t testing.TB, instrument func(*lameduck.Config, S) error, sink S, what string) *lameduck.Config {
	t.Helper()
	if err := instrument(nil, sink); err == nil {
		t.Error("Instrument with a nil Config = nil error")
	}
	var cfg lameduck.Config
	var none S
	if err := instrument(&cfg, none); err == nil {
		t.Errorf("Instrument with a nil %s = nil error", what)
	}
	if cfg.OnTransition != nil {
		t.Errorf("Instrument with a nil %s set OnTransition", what)
	}
	return &cfg
}

package main

import (
	"strings"
	"testing"
)

// docs/probes-and-shutdown.md, Configuration: "A bad value stops New before
// anything is bound, with exit 1 … as one record whose errors member is an
// array with --log-format json"; the README: "an unknown LAMEDUCK_* name
// ends the process with exit code 1 before it listens". Exit 1 exactly, not
// any non-zero code, and every problem in the one record.
func TestE2EBadSettingsExitOneBeforeListening(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"unknown name", env("LAMEDUCK_SHUTDOWN_DELAYS", "5s"), []string{`LAMEDUCK_SHUTDOWN_DELAYS="5s": not a lameduck setting`}},
		{"unknown name, empty", env("LAMEDUCK_SHUTDOWN_DELAYS", ""), []string{`LAMEDUCK_SHUTDOWN_DELAYS="": not a lameduck setting`}},
		{"two problems", env("LAMEDUCK_SHUTDOWN_DELAY", "5", "LAMEDUCK_DRAIN_MODE", "fast"),
			[]string{`LAMEDUCK_SHUTDOWN_DELAY="5": a duration needs a unit`, `LAMEDUCK_DRAIN_MODE="fast": not one of the choices`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startProc(t, tc.env, "--addr", "127.0.0.1:0")
			code, _ := p.waitExit(startTimeout)
			if code != 1 {
				t.Fatalf("exit code %d; want 1\n%s", code, p.output())
			}
			if l, ok := p.findLog(func(l logLine) bool {
				return l.msg() == "lameduck: listening" || strings.Contains(l.msg(), "lameduck: listen on")
			}); ok {
				t.Fatalf("the process got as far as binding: %s", l.raw)
			}
			var errs []logLine
			p.findLog(func(l logLine) bool {
				if l.rec["level"] == "ERROR" {
					errs = append(errs, l)
				}
				return false
			})
			if len(errs) != 1 {
				t.Fatalf("%d ERROR lines; want one:\n%s", len(errs), p.output())
			}
			text := strings.Join(errs[0].messages(), "\n")
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("the ERROR line lacks %q: %s", w, errs[0].raw)
				}
			}
		})
	}
}

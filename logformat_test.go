package lameduck_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// noDurationValues fails t on any attribute whose value is a time.Duration:
// slog's JSON handler writes those as a number of nanoseconds, unlike every
// other duration in the log.
type noDurationValues struct {
	slog.Handler
	t *testing.T
}

func (h noDurationValues) check(a slog.Attr) {
	switch a.Value.Kind() {
	case slog.KindDuration:
		h.t.Errorf("log attribute %s is a time.Duration (%s): JSON writes it as nanoseconds; write d.String()", a.Key, a.Value)
	case slog.KindGroup:
		for _, g := range a.Value.Group() {
			h.check(g)
		}
	}
}

func (h noDurationValues) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool { h.check(a); return true })
	return h.Handler.Handle(ctx, r)
}

func (h noDurationValues) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		h.check(a)
	}
	return noDurationValues{h.Handler.WithAttrs(as), h.t}
}

var (
	// A key that names a time span: its value must be a duration string.
	durationKey = regexp.MustCompile(`(^|_)(timeout|took|window|budget|after|for|since_signal|retry_in|age|ago|delay|margin|grace|teardown|share|elapsed|duration|wait|idle_window|prestop_delay)$`)
	// A string that looks like a duration, which must then be Go's form.
	durationLike = regexp.MustCompile(`^-?[0-9][0-9.]*(ns|us|µs|ms|s|m|h)([0-9.]+(ns|us|µs|ms|s|m|h))*$`)
)

// Every duration in the JSON log is written one way, as Go writes a
// time.Duration ("1.5s", "250ms", "1m0s"): the configuration, the window,
// the budgets, what a step took, a check's timeout and how long a captive
// ping ran. The test runs a sequence that
// writes them all and scans every line.
func TestJSONLogWritesEveryDurationTheSameWay(t *testing.T) {
	var out testsupport.LogBuffer
	// The system clock and short budgets: this test is about the form of
	// the lines, not their timing.
	lc, err := lameduck.New(lameduck.Config{
		ShutdownDelay: 100 * time.Millisecond, ShutdownTeardown: time.Second, TerminationGrace: 30 * time.Second,
		PreStopDelay: 2 * time.Second, StartupTimeout: time.Minute, CheckTimeout: 50 * time.Millisecond,
		Logger:    slog.New(noDurationValues{slog.NewJSONHandler(&out, nil), t}),
		LookupEnv: env(nil), IgnoreSignals: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, lc: lc, logs: &out}
	release := make(chan struct{})
	defer close(release)

	failed := false
	h.lc.AddStartupTask("migrate", func(context.Context) error {
		if !failed {
			failed = true
			return errors.New("connection refused")
		}
		return nil
	}, lameduck.Retry{First: 10 * time.Millisecond})
	h.lc.AddCheck(health.Check{Name: "search", Func: func(ctx context.Context) error { <-release; return nil }})
	h.lc.AddTeardownHook("dispatcher", func(context.Context) error { <-release; return nil })
	h.lc.AddCloser("db", func(context.Context) error { <-release; return nil })
	entered := make(chan struct{}, 1)
	base := h.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	h.start(t)

	c := client(t)
	get(t, c, base+"/readyz").status(t, 200, "degraded") // the check times out
	get(t, c, base+"/readyz").status(t, 200, "degraded") // then it is stalled
	h.lc.GoWrite("audit-row", 0, func(context.Context) error { <-release; return nil })
	sendAsync(c, "GET", base+"/slow")
	recv(t, entered, "the request to enter its handler")
	h.lc.BeginShutdown("test")
	if err := h.wait(); err == nil {
		t.Fatal("Run = nil; want the cut request, the hook and the abandoned write reported")
	}

	lines, sawDuration := 0, 0
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		lines++
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("not JSON: %s", sc.Text())
		}
		var walk func(prefix string, m map[string]any)
		walk = func(prefix string, m map[string]any) {
			for k, v := range m {
				switch v := v.(type) {
				case map[string]any:
					walk(prefix+k+".", v)
				case float64:
					if durationKey.MatchString(k) {
						t.Errorf("%s%s is the number %v: write durations as Go does (\"1.5s\"): %s", prefix, k, v, sc.Text())
					}
				case string:
					if durationLike.MatchString(v) {
						sawDuration++
						if _, err := time.ParseDuration(v); err != nil {
							t.Errorf("%s%s=%q is not a Go duration: %s", prefix, k, v, sc.Text())
						}
					} else if durationKey.MatchString(k) && k != "join_budget" && k != "window_rule" {
						t.Errorf("%s%s=%q names a time span but is no duration: %s", prefix, k, v, sc.Text())
					}
				}
			}
		}
		walk("", rec)
	}
	for _, want := range []string{`"retry_in":"`, `"timeout":"50ms"`, `"running_for":"`, `"http_budget":"`, `"share":"`, `"margin":"`, `"prestop_delay":"2s"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the sequence wrote no %s; the scan does not cover it:\n%s", want, out.String())
		}
	}
	if lines < 12 || sawDuration < 15 {
		t.Fatalf("scanned %d lines and %d durations; want the whole sequence", lines, sawDuration)
	}
}

// A Lifecycle made before slog.SetDefault (a package-level variable, an
// init) logs through the handler set later, each line at its own level with
// its attributes as attributes, and a check's line too. Before, New kept
// the slog.Default() of its moment, whose lines reach the later handler
// only through the log package's bridge: all at INFO, attributes folded
// into the message.
func TestDefaultLoggerIsResolvedWhenLogging(t *testing.T) {
	lc, err := lameduck.New(lameduck.Config{IgnoreSignals: true, ShutdownTeardown: time.Second,
		LookupEnv: func(string) (string, bool) { return "", false }, Environ: func() []string { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	// The process-wide default, replaced for this test only: SetDefault
	// also points the log package at the new handler, so both are restored.
	old, oldOut, oldFlags := slog.Default(), log.Writer(), log.Flags()
	t.Cleanup(func() { slog.SetDefault(old); log.SetOutput(oldOut); log.SetFlags(oldFlags) })
	logs := &testsupport.LogBuffer{}
	slog.SetDefault(slog.New(slog.NewJSONHandler(logs, nil)))

	lc.BeginShutdown("test") // before Run: Run binds nothing, warns, then stops
	if err := lc.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var warned, draining bool
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		msg, _ := rec["msg"].(string)
		switch {
		case strings.HasPrefix(msg, "lameduck: no listener serves the probes"):
			warned = rec["level"] == "WARN"
		case strings.HasPrefix(msg, "lameduck: draining"):
			draining = rec["level"] == "INFO" && rec["reason"] == "test"
		case !strings.HasPrefix(msg, "lameduck: "):
			t.Errorf("a line that is not lameduck's, as the log bridge writes it: %q", line)
		}
	}
	if !warned || !draining {
		t.Fatalf("want the no-listener line at WARN and the draining line at INFO with reason=test, through the handler set after New:\n%s", logs)
	}
}

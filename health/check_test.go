package health_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck/health"
)

func TestAddCheckValidation(t *testing.T) {
	ok := func(context.Context) error { return nil }
	c := health.NewChecker(health.CheckerOptions{})
	mustAdd(t, c, health.Check{Name: "db", Func: ok})
	if err := c.AddGate(health.Gate{Name: "consensus", Func: func() health.GateResult { return health.GateResult{} }}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ch   health.Check
		want string
	}{
		{health.Check{Name: "", Func: ok}, "name is empty"},
		{health.Check{Name: "DB", Func: ok}, `has 'D' at byte 0`},
		{health.Check{Name: "a/b", Func: ok}, `has '/' at byte 1`},
		{health.Check{Name: "..", Func: ok}, "path element"},
		{health.Check{Name: "db", Func: ok}, "already registered"},
		{health.Check{Name: "consensus", Func: ok}, "already registered"},
		{health.Check{Name: "x", Func: nil}, "Func is nil"},
		{health.Check{Name: "x", Func: ok, Timeout: -time.Second}, "Timeout=-1s is negative"},
	} {
		err := c.AddCheck(tc.ch)
		if err == nil || !strings.HasPrefix(err.Error(), "health: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddCheck(%q): %v, want an error with %q", tc.ch.Name, err, tc.want)
		}
	}
	if err := c.AddGate(health.Gate{Name: "db", Func: func() health.GateResult { return health.GateResult{} }}); err == nil {
		t.Error("a gate may not take a check's name")
	}
	if err := c.AddGate(health.Gate{Name: "g"}); err == nil || !strings.Contains(err.Error(), "Func is nil") {
		t.Errorf("nil gate Func: %v", err)
	}
	neg := health.NewChecker(health.CheckerOptions{DefaultTimeout: -1})
	if err := neg.AddCheck(health.Check{Name: "x", Func: ok}); err == nil || !strings.Contains(err.Error(), "DefaultTimeout=-1ns is negative") {
		t.Errorf("negative DefaultTimeout: %v", err)
	}
	if err := neg.AddCheck(health.Check{Name: "x", Func: ok, Timeout: time.Second}); err != nil {
		t.Errorf("a check with its own timeout does not use the default: %v", err)
	}
	if got := strings.Join(c.Names(), ","); got != "consensus,db" {
		t.Errorf("Names() = %q", got)
	}
}

func TestDefaultTimeoutApplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{DefaultTimeout: 250 * time.Millisecond, Logger: quiet()})
		mustAdd(t, c, health.Check{Name: "slow", Func: sleepy(time.Hour, nil)})
		mustAdd(t, c, health.Check{Name: "own", Func: sleepy(time.Hour, nil), Timeout: 100 * time.Millisecond})
		start := time.Now()
		rep := mustRun(t, c, t.Context())
		if time.Since(start) != 250*time.Millisecond || rep.Checks["slow"] != "timeout: no answer within 250ms" ||
			rep.Checks["own"] != "timeout: no answer within 100ms" {
			t.Fatalf("%v after %v", rep.Checks, time.Since(start))
		}
	})
}

// Gates are predicates over in-memory state; failing fails
// readiness like a critical check; not applicable is skipped.
func TestGates(t *testing.T) {
	var logs logBuf
	var panics atomic.Int32
	c := health.NewChecker(health.CheckerOptions{Logger: logs.logger(), OnPanic: func(string, any, []byte) { panics.Add(1) }})
	var state atomic.Value
	state.Store(health.GateResult{Applicable: true, OK: true})
	if err := c.AddGate(health.Gate{Name: "consensus", Func: func() health.GateResult { return state.Load().(health.GateResult) }}); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, c, health.Check{Name: "cache", Func: func(context.Context) error { return errors.New("down") }})

	for _, tc := range []struct {
		gr     health.GateResult
		text   string
		status health.Status
	}{
		{health.GateResult{Applicable: true, OK: true}, "ok", health.StatusDegraded},
		{health.GateResult{Applicable: true, OK: false, Reason: "consensus group is empty"}, "failed: consensus group is empty", health.StatusFailed},
		{health.GateResult{Applicable: true, OK: false}, "failed", health.StatusFailed},
		{health.GateResult{Applicable: false, Reason: "consensus not enabled"}, "skipped: consensus not enabled", health.StatusDegraded},
		{health.GateResult{Applicable: false, OK: false}, "skipped", health.StatusDegraded},
	} {
		state.Store(tc.gr)
		rep := mustRun(t, c, t.Context())
		if rep.Checks["consensus"] != tc.text || rep.Status != tc.status {
			t.Errorf("%+v: %q %q, want %q %q", tc.gr, rep.Checks["consensus"], rep.Status, tc.text, tc.status)
		}
	}
	// Only the gate: skipped passes, so readiness is ok.
	state.Store(health.GateResult{})
	if rep, err := c.Run(t.Context(), "consensus", nil); err != nil || rep.Status != health.StatusOK {
		t.Errorf("only the skipped gate: %+v %v", rep, err)
	}
	// A panicking gate fails readiness and reaches the hook.
	c2 := health.NewChecker(health.CheckerOptions{Logger: quiet(), OnPanic: func(string, any, []byte) { panics.Add(1) }})
	if err := c2.AddGate(health.Gate{Name: "g", Func: func() health.GateResult { panic("nil map") }}); err != nil {
		t.Fatal(err)
	}
	if rep := mustRun(t, c2, t.Context()); rep.Checks["g"] != "panic: nil map" || rep.Status != health.StatusFailed {
		t.Errorf("panicking gate: %+v", rep)
	}
	if panics.Load() != 1 {
		t.Errorf("OnPanic called %d times", panics.Load())
	}
	if n := logs.count("gate=consensus", "is failing"); n != 1 {
		t.Errorf("%d 'failing' lines for the gate, want 1 (one transition):\n%s", n, logs.String())
	}
}

// The Kubernetes API server's conventions: one check by name, exclusions,
// unknown names listed.
func TestOnlyExcludeUnknown(t *testing.T) {
	c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	var dbCalls, cacheCalls atomic.Int32
	mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: func(context.Context) error { dbCalls.Add(1); return nil }})
	mustAdd(t, c, health.Check{Name: "cache", Func: func(context.Context) error { cacheCalls.Add(1); return errors.New("x") }})

	rep, err := c.Run(t.Context(), "db", nil)
	if err != nil || len(rep.Checks) != 1 || rep.Checks["db"] != "ok" || rep.Status != health.StatusOK || cacheCalls.Load() != 0 {
		t.Fatalf("only=db: %+v %v (cache calls %d)", rep, err, cacheCalls.Load())
	}
	rep, err = c.Run(t.Context(), "cache", nil)
	if err != nil || rep.Status != health.StatusDegraded {
		t.Fatalf("only=cache keeps the criticality rule: %+v %v", rep, err)
	}
	rep, err = c.Run(t.Context(), "", []string{"cache", "cache"})
	if err != nil || len(rep.Checks) != 1 || rep.Status != health.StatusOK || strings.Join(rep.Excluded, ",") != "cache" {
		t.Fatalf("exclude=cache: %+v %v", rep, err)
	}
	// An unknown ?exclude is ignored and reported (kube-apiserver's rule).
	rep, err = c.Run(t.Context(), "", []string{"db", "nope", "nope"})
	if err != nil || strings.Join(rep.Unmatched, ",") != "nope" || strings.Join(rep.Excluded, ",") != "db" {
		t.Fatalf("exclude=db,nope: %+v %v", rep, err)
	}
	for _, tc := range []struct {
		only    string
		exclude []string
		want    string
	}{
		{"nope", nil, `health: unknown check "nope"; known checks and gates: cache, db`},
	} {
		before := dbCalls.Load()
		_, err := c.Run(t.Context(), tc.only, tc.exclude)
		if !errors.Is(err, health.ErrUnknownCheck) || err.Error() != tc.want {
			t.Errorf("Run(%q, %v) error %v, want %q", tc.only, tc.exclude, err, tc.want)
		}
		if dbCalls.Load() != before {
			t.Error("an unknown name must probe nothing")
		}
	}
}

// Under HideDetails, bodies carry the outcome word only; logs keep the
// (redacted) text.
func TestHideDetails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuf
		c := health.NewChecker(health.CheckerOptions{HideDetails: true, Logger: logs.logger()})
		release := make(chan struct{})
		defer close(release)
		var calls atomic.Int32
		mustAdd(t, c, health.Check{Name: "err", Func: sleepy(0, errors.New("dial 10.0.0.7:5432: refused"))})
		mustAdd(t, c, health.Check{Name: "pan", Func: func(context.Context) error { panic("internal detail") }})
		mustAdd(t, c, health.Check{Name: "wedge", Func: wedge(release, &calls)})
		if err := c.AddGate(health.Gate{Name: "gate", Func: func() health.GateResult {
			return health.GateResult{Applicable: true, Reason: "group db-eu-1 empty"}
		}}); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"err": "error", "pan": "panic", "wedge": "timeout", "gate": "failed"}
		if got := mustRun(t, c, t.Context()).Checks; !equalMaps(got, want) {
			t.Fatalf("first probe %v, want %v", got, want)
		}
		want["wedge"] = "stalled"
		if got := mustRun(t, c, t.Context()).Checks; !equalMaps(got, want) {
			t.Fatalf("second probe %v, want %v", got, want)
		}
		synctest.Wait() // pings log after publishing their verdicts
		if !strings.Contains(logs.String(), "10.0.0.7:5432") || !strings.Contains(logs.String(), "group db-eu-1 empty") {
			t.Fatalf("the log lost the text:\n%s", logs.String())
		}
	})
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

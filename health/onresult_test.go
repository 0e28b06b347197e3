package health_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lameduck/lameduck/health"
)

// OnResult hears one verdict per ping (ok, error, timeout) and one
// "stalled" per probe that finds a ping captive; gates are not reported.
func TestOnResultOnePerVerdict(t *testing.T) {
	var mu sync.Mutex
	var got []string
	c := health.NewChecker(health.CheckerOptions{OnResult: func(r health.Result) {
		mu.Lock()
		got = append(got, r.Name+"="+string(r.Outcome))
		mu.Unlock()
	}})
	release := make(chan struct{})
	defer close(release)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.AddCheck(health.Check{Name: "a", Func: func(context.Context) error { return nil }}))
	must(c.AddCheck(health.Check{Name: "b", Func: func(context.Context) error { return errors.New("down") }}))
	must(c.AddCheck(health.Check{Name: "w", Timeout: 20 * time.Millisecond, Func: func(context.Context) error { <-release; return nil }}))
	must(c.AddGate(health.Gate{Name: "g", Func: func() health.GateResult { return health.GateResult{Applicable: true, OK: true} }}))
	for range 3 {
		if _, err := c.Run(context.Background(), "", nil); err != nil {
			t.Fatal(err)
		}
	}
	// A ping reports after its probes have their answer: wait for the
	// count, not for a time.
	want := []string{"a=ok", "a=ok", "a=ok", "b=error", "b=error", "b=error", "w=stalled", "w=stalled", "w=timeout"}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("OnResult heard %v, want %v", got, want)
	}
}

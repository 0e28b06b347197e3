package health_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/health"
)

// A critical sidecar, which only this pod uses, and a non-critical object
// store, which every replica shares: the store failing degrades readiness
// (still 200) instead of taking every pod out of the Service.
func ExampleChecker_Run() {
	c := health.NewChecker(health.CheckerOptions{
		DefaultTimeout: time.Second,
		Logger:         slog.New(slog.DiscardHandler),
	})
	_ = c.AddCheck(health.Check{Name: "sidecar", Critical: true, Func: func(ctx context.Context) error {
		return nil // a dial to 127.0.0.1:15000
	}})
	_ = c.AddCheck(health.Check{Name: "s3", Func: func(ctx context.Context) error {
		return errors.New("dial tcp 10.0.0.7:443: connection refused")
	}})
	rep, _ := c.Run(context.Background(), "", nil)
	fmt.Println(rep.Status, rep.Status.Code())
	fmt.Println(rep.Checks["sidecar"])
	fmt.Println(rep.Checks["s3"])
	// Output:
	// degraded 200
	// ok
	// error: dial tcp 10.0.0.7:443: connection refused
}

// A readiness gate over state the application owns: readiness
// fails while the consensus set is empty, and the gate is skipped where
// consensus is not enabled.
func ExampleChecker_AddGate() {
	var members atomic.Int32
	c := health.NewChecker(health.CheckerOptions{Logger: slog.New(slog.DiscardHandler)})
	_ = c.AddGate(health.Gate{Name: "consensus", Func: func() health.GateResult {
		n := members.Load()
		return health.GateResult{Applicable: true, OK: n > 0, Reason: fmt.Sprintf("%d members", n)}
	}})
	rep, _ := c.Run(context.Background(), "", nil)
	fmt.Println(rep.Status, rep.Checks["consensus"])
	members.Store(3)
	rep, _ = c.Run(context.Background(), "", nil)
	fmt.Println(rep.Status, rep.Checks["consensus"])
	// Output:
	// failed failed: 0 members
	// ok ok
}

// The Kubernetes API server's verbose report, as an operator's curl sees it.
func ExampleChecker_ServeReadiness() {
	c := health.NewChecker(health.CheckerOptions{Logger: slog.New(slog.DiscardHandler)})
	_ = c.AddCheck(health.Check{Name: "sidecar", Critical: true, Func: func(context.Context) error { return nil }})
	_ = c.AddCheck(health.Check{Name: "cache", Func: func(context.Context) error {
		return errors.New("redis://app:hunter2@cache:6379: connection refused")
	}})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/readyz?verbose", nil)
	c.ServeReadiness(rec, req, &health.Info{Version: "v1.2.0", Commit: "a984b10"}, "", map[string]any{"phase": "serving"})
	fmt.Println(rec.Code)
	fmt.Print(rec.Body)
	// Output:
	// 200
	// [-]cache failed: error: redis://REDACTED@cache:6379: connection refused
	// [+]sidecar ok
	// readyz check passed
}

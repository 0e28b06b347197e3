package health_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck/health"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// A check's context: the ping's deadline, the probe's values, no
// cancellation of the probe's; a child context registers with it without a
// goroutine of its own; Err goes with Done; once the ping has returned the
// context is done.
func TestCheckContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		var (
			kept        context.Context
			deadlineOK  bool
			valueOK     bool
			errBefore   error
			childGrowth int
			childDL     time.Time
			afterErr    error
			afterDone   bool
		)
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		start := time.Now()
		mustAdd(t, c, health.Check{Name: "db", Timeout: 2 * time.Second, Func: func(ctx context.Context) error {
			kept = ctx
			dl, ok := ctx.Deadline()
			deadlineOK = ok && dl.Equal(start.Add(2*time.Second))
			valueOK = ctx.Value(key{}) == "trace-1"
			errBefore = ctx.Err()
			child, cancel := context.WithTimeout(ctx, time.Hour)
			childGrowth = contextGoroutines(t)
			childDL, _ = child.Deadline()
			cancel()
			time.Sleep(3 * time.Second) // past the deadline: Err and Done agree
			afterErr = ctx.Err()
			select {
			case <-ctx.Done():
				afterDone = true
			default:
			}
			return nil
		}})
		probeCtx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "trace-1"))
		cancel() // the probe's cancellation is not the ping's
		rep, err := c.Run(probeCtx, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.Checks["db"]; !strings.HasPrefix(got, "timeout: no answer within ") {
			t.Fatalf("db: %q, want the timeout of a probe whose own context had ended", got)
		}
		synctest.Wait()
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if !deadlineOK || !valueOK || errBefore != nil {
			t.Fatalf("deadline ok %v, value ok %v, Err before the deadline %v", deadlineOK, valueOK, errBefore)
		}
		if childGrowth != 0 || !childDL.Equal(start.Add(2*time.Second)) {
			t.Fatalf("a child context started %d goroutines (created by package context) and has deadline %v", childGrowth, childDL)
		}
		if !errors.Is(afterErr, context.DeadlineExceeded) || !afterDone {
			t.Fatalf("past the deadline: Err %v, Done closed %v", afterErr, afterDone)
		}
		if kept.Err() == nil {
			t.Fatal("the context of a returned ping is not done")
		}
	})
}

// contextGoroutines counts the goroutines of the calling goroutine's
// synctest bubble that package context started (a parent it cannot
// propagate cancellation through costs one, "created by
// context.(*cancelCtx).propagateCancel"). Counting those alone, not the
// bubble's goroutines before and after, keeps another goroutine of the
// bubble that ends between two counts from reading as -1.
func contextGoroutines(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 1<<20)
	header, _, _ := strings.Cut(string(buf[:runtime.Stack(buf, false)]), "\n")
	_, bubble, ok := strings.Cut(header, ", synctest bubble ") // "3]:"
	if !ok {
		// The traceback no longer names the bubble: fail rather than count
		// nothing and pass whatever happens.
		t.Errorf("no synctest bubble in the goroutine's header %q", header)
		return 0
	}
	count, seen := 0, 0
	for g := range strings.SplitSeq(testsupport.AllStacks(), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if !strings.HasPrefix(header, "goroutine ") || !strings.HasSuffix(strings.TrimSpace(header), ", synctest bubble "+bubble) {
			continue
		}
		seen++
		if strings.Contains(g, "\ncreated by context.") {
			count++
		}
	}
	if seen == 0 { // the caller is in the bubble: the format has changed
		t.Errorf("no goroutine of bubble %q found in the stacks", bubble)
	}
	return count
}

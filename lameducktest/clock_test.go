package lameducktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/lameduck/lameduck/lameducktest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestTimersFireInOrderAtTheirDeadline(t *testing.T) {
	c := lameducktest.NewClock(epoch)
	late := c.NewTimer(3 * time.Second)
	early := c.NewTimer(time.Second)
	c.Advance(time.Second - time.Nanosecond)
	if _, ok := fired(early.C()); ok {
		t.Fatal("fired early")
	}
	c.Advance(5 * time.Second)
	if at, ok := fired(early.C()); !ok || !at.Equal(epoch.Add(time.Second)) {
		t.Fatalf("early timer: %v %v", at, ok)
	}
	if at, ok := fired(late.C()); !ok || !at.Equal(epoch.Add(3*time.Second)) {
		t.Fatalf("late timer: %v %v", at, ok)
	}
	if got := c.Now(); !got.Equal(epoch.Add(6*time.Second - time.Nanosecond)) {
		t.Fatalf("Now = %v", got)
	}
}

func TestStopAndZeroTimers(t *testing.T) {
	c := lameducktest.NewClock(epoch)
	if _, ok := fired(c.NewTimer(0).C()); !ok {
		t.Fatal("a zero timer did not fire at once")
	}
	tm := c.NewTimer(time.Second)
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop should report true once")
	}
	c.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
}

func TestWaitForTimers(t *testing.T) {
	c := lameducktest.NewClock(epoch)
	go func() { c.NewTimer(time.Second) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := c.WaitForTimers(short, 2); err == nil {
		t.Fatal("WaitForTimers ignored its context")
	}
}

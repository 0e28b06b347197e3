package health_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck/health"
)

// probers runs n probers, the i-th starting at i×offset, each probing every
// period until end (all on the bubble's fake clock), and returns every
// report.
func probers(t *testing.T, c *health.Checker, n int, offset, period, end time.Duration) []health.Report {
	var mu sync.Mutex
	var reps []health.Report
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * offset)
			for time.Since(start) < end {
				rep, err := c.Run(context.Background(), "", nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				reps = append(reps, rep)
				mu.Unlock()
				time.Sleep(period)
			}
		})
	}
	wg.Wait()
	return reps
}

// Five probers, each probing every 100ms for 5s: with MaxAge 1s the
// dependency is pinged at most 6 times; with MaxAge 0, once per probe (the
// probers are 20ms apart, so no two probes overlap a ping), as before
// MaxAge existed.
func TestMaxAgeBoundsPingsPerDependency(t *testing.T) {
	for _, tc := range []struct {
		maxAge    time.Duration
		min, most int32
	}{
		{time.Second, 1, 6},
		{0, -1, -1}, // one per probe
	} {
		t.Run(tc.maxAge.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
				var pings atomic.Int32
				mustAdd(t, c, health.Check{Name: "db", Critical: true, MaxAge: tc.maxAge, Func: func(ctx context.Context) error {
					pings.Add(1)
					return sleepy(5*time.Millisecond, nil)(ctx)
				}})
				reps := probers(t, c, 5, 20*time.Millisecond, 100*time.Millisecond, 5*time.Second)
				if tc.min < 0 {
					tc.min, tc.most = int32(len(reps)), int32(len(reps))
				}
				if n := pings.Load(); n < tc.min || n > tc.most {
					t.Fatalf("%d probes pinged the dependency %d times, want %d to %d", len(reps), n, tc.min, tc.most)
				}
				for _, rep := range reps {
					if rep.Status != health.StatusOK {
						t.Fatalf("%+v", rep)
					}
					if r := rep.Results[0]; r.Cached && (tc.maxAge == 0 || r.Age >= tc.maxAge) {
						t.Fatalf("served a result %v old with MaxAge %v", r.Age, tc.maxAge)
					}
				}
			})
		})
	}
}

// A dependency that fails: the first probe after the cached success has
// expired reports the failure, so a failure shows no later than MaxAge
// after it began; and the failure, once observed, is held no longer than a
// success would be.
func TestMaxAgeFailureShowsWithinMaxAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		var down atomic.Bool
		mustAdd(t, c, health.Check{Name: "db", Critical: true, MaxAge: time.Second, Func: func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}})
		start := time.Now()
		if rep := mustRun(t, c, t.Context()); rep.Status != health.StatusOK || rep.Results[0].Cached {
			t.Fatalf("first probe: %+v", rep)
		}
		time.Sleep(300 * time.Millisecond)
		down.Store(true) // the outage begins 300ms after the last ping
		failedAt := time.Now()
		var seen time.Time
		for time.Since(start) < 5*time.Second {
			rep := mustRun(t, c, t.Context())
			if rep.Status == health.StatusFailed && seen.IsZero() {
				seen = time.Now()
				if rep.Results[0].Cached {
					t.Fatal("the failure was first read from a cached result")
				}
			}
			if !seen.IsZero() && rep.Status == health.StatusOK {
				t.Fatal("ok after the failure was seen, with the dependency still down")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if seen.IsZero() || seen.Sub(failedAt) > time.Second {
			t.Fatalf("the failure began at +%v and was first reported at +%v; want within MaxAge (1s)", failedAt.Sub(start), seen.Sub(start))
		}
		// Recovery shows as fast: held no longer than MaxAge.
		down.Store(false)
		recovered := time.Now()
		for mustRun(t, c, t.Context()).Status != health.StatusOK {
			time.Sleep(50 * time.Millisecond)
		}
		if took := time.Since(recovered); took > time.Second {
			t.Fatalf("a failing result was held %v after the recovery; want at most MaxAge", took)
		}
	})
}

// A wedged check with MaxAge: "timeout" at its deadline, then "stalled",
// never the "ok" it answered before, and one captive goroutine: the cached
// result never stands in for a ping in flight.
func TestMaxAgeWedgedCheckTimeoutThenStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		release := make(chan struct{})
		var wedged atomic.Bool
		var calls atomic.Int32
		mustAdd(t, c, health.Check{Name: "mongo", Critical: true, MaxAge: 2 * time.Second, Timeout: time.Second, Func: func(context.Context) error {
			calls.Add(1)
			if wedged.Load() {
				<-release
			}
			return nil
		}})
		if got := mustRun(t, c, t.Context()).Checks["mongo"]; got != "ok" {
			t.Fatal(got)
		}
		wedged.Store(true)
		time.Sleep(2 * time.Second) // the ok has expired
		start := time.Now()
		rep := mustRun(t, c, t.Context())
		if got := rep.Checks["mongo"]; got != "timeout: no answer within 1s" || time.Since(start) != time.Second {
			t.Fatalf("after the ok expired: %q after %v, want a timeout at the 1s deadline", got, time.Since(start))
		}
		for range 10 {
			time.Sleep(500 * time.Millisecond)
			got := mustRun(t, c, t.Context()).Checks["mongo"]
			if !strings.HasPrefix(got, "stalled") {
				t.Fatalf("while captive: %q, want stalled", got)
			}
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("the check was launched %d times, want 2 (one ok, one captive)", n)
		}
		if got := c.Captive(); len(got) != 1 {
			t.Fatalf("Captive() = %v", got)
		}
		close(release)
		synctest.Wait()
	})
}

// The verbose and health+json bodies say how old a cached result is.
func TestMaxAgeShownInBodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		mustAdd(t, c, health.Check{Name: "db", MaxAge: time.Second, Func: func(context.Context) error { return nil }})
		mustAdd(t, c, health.Check{Name: "queue", Func: func(context.Context) error { return nil }})
		info := &health.Info{Version: "v1", Commit: "c"}
		serve := func(target string, accept string) string {
			r := httptest.NewRequest("GET", target, nil)
			if accept != "" {
				r.Header.Set("Accept", accept)
			}
			w := httptest.NewRecorder()
			c.ServeReadiness(w, r, info, "", nil)
			return w.Body.String()
		}
		if body := serve("/readyz?verbose", ""); strings.Contains(body, "age") {
			t.Fatalf("a fresh result with an age:\n%s", body)
		}
		time.Sleep(350 * time.Millisecond)
		if body, want := serve("/readyz?verbose", ""), "[+]db ok (age 350ms)\n[+]queue ok\n"; !strings.HasPrefix(body, want) {
			t.Fatalf("verbose:\n%s\nwant it to begin with\n%s", body, want)
		}
		body := serve("/readyz", health.MediaTypeHealthJSON)
		if !strings.Contains(body, `"db":[{"componentType":"component","status":"pass","time":"`) || !strings.Contains(body, `,"age":"350ms"}]`) ||
			strings.Count(body, `"age"`) != 1 {
			t.Fatalf("health+json: %s", body)
		}
	})
}

// RunRefresh keeps a check's result fresh on its own schedule: probes then
// read it and never ping; it stops when its context ends.
func TestRunRefreshKeepsResultFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		var pings atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", MaxAge: time.Second, Refresh: true, Func: func(context.Context) error {
			pings.Add(1)
			return nil
		}})
		mustAdd(t, c, health.Check{Name: "plain", MaxAge: time.Second, Func: func(context.Context) error { return nil }})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); c.RunRefresh(ctx) }()
		time.Sleep(time.Second + 50*time.Millisecond) // the first refresh comes within one MaxAge
		if n := pings.Load(); n < 1 || n > 2 {
			t.Fatalf("%d refreshes in the first MaxAge, want 1 (2 if the first came early)", n)
		}
		for range 100 { // 10s of probes every 100ms
			if r := mustRun(t, c, t.Context()).Results[0]; !r.Cached || r.Age >= time.Second {
				t.Fatalf("a probe read %+v; want a cached result younger than MaxAge", r)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if n := pings.Load(); n < 10 || n > 14 {
			t.Fatalf("%d refreshes in 11s with MaxAge 1s, want about one per MaxAge", n)
		}
		cancel()
		<-done
		n := pings.Load()
		time.Sleep(5 * time.Second)
		if pings.Load() != n {
			t.Fatal("a refresh after RunRefresh returned")
		}
	})
}

// A reused result is judged when the report is built, not when the probe
// began: beside a check that takes 1s, a result 200ms old at the start of
// the probe is 1.2s old when the answer is written. With a MaxAge of 300ms
// it is not served (db is pinged again, and its failure since shows); with
// a MaxAge of 2s it is, labelled with its age then. Before, the age was
// judged and labelled at the probe's start: "ok (age 200ms)", 1.2s after
// db's last answer and 1.2s into its outage.
func TestMaxAgeJudgedWhenTheAnswerIsBuilt(t *testing.T) {
	for _, tc := range []struct {
		maxAge time.Duration
		served bool // the cached ok is served
	}{{300 * time.Millisecond, false}, {2 * time.Second, true}} {
		t.Run(tc.maxAge.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
				var failing atomic.Bool
				mustAdd(t, c, health.Check{Name: "db", MaxAge: tc.maxAge, Func: func(context.Context) error {
					if failing.Load() {
						return errors.New("down")
					}
					return nil
				}})
				mustAdd(t, c, health.Check{Name: "slow", Timeout: 2 * time.Second, Func: func(context.Context) error {
					time.Sleep(time.Second)
					return nil
				}})
				if r, err := c.Run(t.Context(), "db", nil); err != nil || !r.Results[0].Outcome.Passing() {
					t.Fatalf("db's first ping: %+v, %v", r, err)
				}
				failing.Store(true)
				time.Sleep(200 * time.Millisecond)
				db := mustRun(t, c, t.Context()).Results[0]
				if db.Name != "db" {
					t.Fatalf("results in name order, got %q first", db.Name)
				}
				if !tc.served {
					if db.Cached || db.Outcome.Passing() {
						t.Fatalf("db read %+v: a result 1.2s old served with MaxAge %s", db, tc.maxAge)
					}
					return
				}
				if !db.Cached || db.Age != 1200*time.Millisecond {
					t.Fatalf("db read %+v; want the cached ok, labelled 1.2s old", db)
				}
			})
		})
	}
}

// A check with Refresh added while RunRefresh waits for another one (due
// within the hour) is refreshed from then on, first within one MaxAge of
// being added. Before, RunRefresh looked at the registry again only when
// it woke for the old check.
func TestRunRefreshWakesForACheckAddedWhileItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
		mustAdd(t, c, health.Check{Name: "hourly", MaxAge: time.Hour, Refresh: true, Func: func(context.Context) error { return nil }})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); c.RunRefresh(ctx) }()
		synctest.Wait() // RunRefresh sleeps until the hourly check is due
		var pings atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", MaxAge: time.Second, Refresh: true, Func: func(context.Context) error {
			pings.Add(1)
			return nil
		}})
		time.Sleep(time.Second) // the first refresh comes within one MaxAge of AddCheck
		synctest.Wait()
		if n := pings.Load(); n < 1 {
			t.Fatalf("%d refreshes in the MaxAge after AddCheck, want 1", n)
		}
		time.Sleep(5 * time.Second)
		if n := pings.Load(); n < 5 {
			t.Fatalf("%d refreshes in 6s with MaxAge 1s, want about one per MaxAge", n)
		}
		cancel()
		<-done
	})
}

// The probe cost when served from a fresh result: no ping, no goroutine.
func BenchmarkServeReadinessFromFreshResult(b *testing.B) {
	benchServeReadiness(b, threeTrivialWith(b, health.CheckerOptions{Logger: quiet(), DefaultMaxAge: time.Hour}))
}

// "Set it per check (health.Check.MaxAge) or for every check that sets none
// (CheckerOptions.DefaultMaxAge …); a negative MaxAge on one check opts it
// out of the default" (docs/probes-and-shutdown.md): with a default of one
// hour, the check that opts out is pinged by every probe, the other once.
func TestNegativeMaxAgeOptsOutOfTheDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := health.NewChecker(health.CheckerOptions{Logger: quiet(), DefaultMaxAge: time.Hour})
		var shared, local atomic.Int32
		mustAdd(t, c, health.Check{Name: "db", Func: func(context.Context) error { shared.Add(1); return nil }})
		mustAdd(t, c, health.Check{Name: "sidecar", MaxAge: -1, Func: func(context.Context) error { local.Add(1); return nil }})
		const probes = 5
		for range probes {
			if _, err := c.Run(context.Background(), "", nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		if n := local.Load(); n != probes {
			t.Errorf("the check with MaxAge -1 was pinged %d times by %d probes; want every probe (opted out of the default)", n, probes)
		}
		if n := shared.Load(); n != 1 {
			t.Errorf("the check under the 1h default was pinged %d times by %d probes a second apart; want 1", n, probes)
		}
	})
}

package health

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Run probes the checks and gates once and returns the readiness report.
//
// only, when not empty, restricts the probe to the check or gate of that
// name (the Kubernetes API server's /readyz/<name>); exclude leaves the
// named ones out (?exclude=<name>). When only or an exclude names nothing
// registered, Run returns an error wrapping [ErrUnknownCheck] whose message
// lists the known names, and probes nothing.
//
// Steps, in order:
//  1. each selected check's ping is launched, joined, or found captive
//     (see [Check].Func): all pings run concurrently, each under its own
//     deadline (counted from the start of the probe that launched it), so
//     Run answers in max(ping), not sum(ping). Pings that return at once
//     share one goroutine, so they cost no goroutine start each;
//  2. each selected gate is evaluated, in this goroutine;
//  3. Run waits for each ping's verdict, up to the ping's deadline, or
//     until ctx ends, whichever comes first. A ping still running when ctx
//     ends goes on for the probes that share it; this probe reports it
//     "timeout: no answer within <how long it waited>".
//
// The report: Status [StatusFailed] when a critical check or any gate
// fails; otherwise [StatusDegraded] when a non-critical check fails;
// otherwise [StatusOK]. Checks maps each selected name to its result text
// and Results holds the same results in name order. Excluded lists the
// excluded names, sorted; names in exclude that match no check or gate are
// ignored and listed in Unmatched (the Kubernetes API server's convention;
// at most 16 of them, each cut to 64 bytes, since the query comes from
// whoever can reach the port). With no check and no gate registered, Run returns
// Report{Status: StatusOK} with nil Checks, so readiness is exactly the
// phase answer.
//
// Unless a check has a MaxAge, no result is cached: every result comes from
// a ping that returned after this probe began, or that was still running
// when it began. With a MaxAge, a result may come from a ping that answered
// less than MaxAge before the report was built (Result.Cached, and
// Result.Age, its age then): a reused result is judged once the probe has
// waited for its pings, and one that reached its MaxAge meanwhile is
// replaced by a fresh ping, which this probe waits for too. Run does not
// set Fields or Code. It is safe for concurrent use; concurrent probes share
// pings rather than start their own.
func (c *Checker) Run(ctx context.Context, only string, exclude []string) (Report, error) {
	return c.run(ctx, only, exclude, nil, true)
}

// run is Run. The results go into buf when it has room (ServeReadiness
// passes a pooled one), else into a new slice; the Checks map is built only
// when withMap is set, and otherwise the report says its checks are in
// Results (checksInResults), which is all the renderings need.
func (c *Checker) run(ctx context.Context, only string, exclude []string, buf []Result, withMap bool) (Report, error) {
	reg := c.reg.Load()
	if reg == nil {
		reg = &registry{}
	}
	if only != "" {
		if _, ok := reg.byName[only]; !ok {
			return Report{}, unknown(reg, only, "")
		}
	}
	// An unknown ?exclude is ignored and reported, as the Kubernetes API
	// server does: a probe that excludes a check this build lacks must not
	// keep a healthy pod out of the Service.
	// The query is the client's: at most maxUnmatched names, each cut to
	// maxUnmatchedBytes, are kept, so a long ?exclude= list costs linear
	// time and a bounded echo.
	var unmatched []string
	known := exclude[:0:0]
	for _, x := range exclude {
		if _, ok := reg.byName[x]; ok {
			known = append(known, x)
			continue
		}
		if len(x) > maxUnmatchedBytes {
			x = strings.ToValidUTF8(x[:maxUnmatchedBytes], "") + "…"
		}
		if len(unmatched) < maxUnmatched && !slices.Contains(unmatched, x) {
			unmatched = append(unmatched, x)
		}
	}
	exclude = known
	if len(reg.entries) == 0 {
		return Report{Status: StatusOK, Unmatched: unmatched}, nil
	}

	sel := reg.entries
	switch {
	case only != "":
		i := reg.byName[only]
		sel = reg.entries[i : i+1 : i+1]
		if slices.Contains(exclude, only) {
			sel = nil
		}
	case len(exclude) > 0:
		sel = make([]*entry, 0, len(reg.entries))
		for _, e := range reg.entries {
			if !slices.Contains(exclude, e.name) {
				sel = append(sel, e)
			}
		}
	}

	var results []Result
	if cap(buf) >= len(sel) {
		results = buf[:len(sel)]
		clear(results)
	} else {
		results = make([]Result, len(sel))
	}
	c.probe(ctx, sel, results, true)

	rep := Report{Status: StatusOK, Results: results}
	if withMap {
		rep.Checks = make(map[string]string, len(sel))
	} else {
		rep.checksInResults = true
	}
	for _, r := range results {
		if withMap {
			rep.Checks[r.Name] = r.Text
		}
		switch {
		case r.Outcome.Passing():
		case r.Critical:
			rep.Status = StatusFailed
		case rep.Status == StatusOK:
			rep.Status = StatusDegraded
		}
	}
	if len(exclude) > 0 {
		rep.Excluded = slices.Compact(slices.Sorted(slices.Values(exclude)))
	}
	rep.Unmatched = unmatched
	return rep, nil
}

// probe runs the checks and gates of sel (sorted by name) once, writing
// sel[i]'s result to results[i]: Run's steps 1 to 3. reuse lets a check
// with a MaxAge answer from its last result (false for a refresh).
func (c *Checker) probe(ctx context.Context, sel []*entry, results []Result, reuse bool) {
	start := time.Now() // the one clock read of a probe whose pings all return at once
	var fbuf [8]*flight
	flights := fbuf[:0]
	if len(sel) > len(fbuf) {
		flights = make([]*flight, 0, len(sel))
	}
	flights = flights[:len(sel)]
	var batch []flight // the pings this probe launches
	for i, e := range sel {
		if e.check == nil {
			continue
		}
		f, res, answered := e.check.arrive(ctx, start, &batch, len(sel)-i, reuse)
		if answered {
			results[i] = res
		} else {
			flights[i] = f
		}
	}
	if len(batch) > 0 {
		launch(batch)
	}
	for i, e := range sel {
		if e.gate != nil {
			results[i] = e.gate.eval()
		}
	}
	if c.testHookWait != nil {
		c.testHookWait()
	}
	var tm *time.Timer
	for i, e := range sel {
		if f := flights[i]; f != nil {
			results[i] = e.check.wait(ctx, f, start, &tm)
		}
	}
	if reuse {
		c.rejudge(ctx, sel, results, flights, start, &tm)
	}
	if tm != nil {
		tm.Stop()
	}
}

// rejudge judges the reused results of a probe (Result.Cached) when its
// answer is built, after it waited for its pings, rather than at its start:
// each is labelled with its age now, and one that has reached its MaxAge
// meanwhile is replaced by a fresh verdict (a ping this probe launches, or
// joins, as a probe arriving now would, reading no result). That waits
// again, so the reused results left are judged again, until none has
// expired: each round replaces at least one, so there are at most as many
// rounds as checks. flights is probe's scratch slice, reused here.
func (c *Checker) rejudge(ctx context.Context, sel []*entry, results []Result, flights []*flight, start time.Time, tm **time.Timer) {
	for {
		var now time.Time
		var batch []flight
		expired := false
		for i, e := range sel {
			flights[i] = nil
			r := &results[i]
			if !r.Cached {
				continue
			}
			if now.IsZero() {
				now = time.Now()
			}
			if age := now.Sub(r.Time); age < e.check.maxAge {
				r.Age = max(age, 0)
				continue
			}
			expired = true
			f, res, answered := e.check.arrive(ctx, now, &batch, len(sel)-i, false)
			if answered {
				results[i] = res
			} else {
				flights[i] = f
			}
		}
		if !expired {
			return
		}
		if len(batch) > 0 {
			launch(batch)
		}
		for i, e := range sel {
			if f := flights[i]; f != nil {
				results[i] = e.check.wait(ctx, f, start, tm)
			}
		}
	}
}

// Bounds on the unmatched ?exclude= names a report keeps.
const (
	maxUnmatched      = 16
	maxUnmatchedBytes = 64
)

func unknown(reg *registry, name, where string) error {
	known := "none is registered"
	if len(reg.entries) > 0 {
		names := make([]string, len(reg.entries))
		for i, e := range reg.entries {
			names[i] = e.name
		}
		known = strings.Join(names, ", ")
	}
	if len(name) > maxUnmatchedBytes { // the client's text, echoed in a body
		name = strings.ToValidUTF8(name[:maxUnmatchedBytes], "") + "…"
	}
	return fmt.Errorf("%w %q%s; known checks and gates: %s", ErrUnknownCheck, name, where, known)
}

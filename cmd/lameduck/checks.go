package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lameduck/lameduck/checks"
	"github.com/lameduck/lameduck/cmd/lameduck/internal/ctxtime"
	"github.com/lameduck/lameduck/health"
)

// checkFlags are the demo's readiness-check flags, each repeatable.
type checkFlags struct {
	simulate []string // NAME=MODE[,critical]
	tcp      []string // NAME=HOST:PORT[,critical]
	http     []string // NAME=URL[,critical]
	dns      []string // NAME=HOST[,critical]
}

// pingCounts counts the pings of each simulated check, for the probe
// bodies' "simulated_pings" member: how often each simulated dependency
// was really pinged, which LAMEDUCK_CHECK_MAX_AGE bounds.
type pingCounts map[string]*atomic.Int64

// fields returns the "simulated_pings" member, or nil when no check is
// simulated.
func (pc pingCounts) fields() map[string]any {
	if len(pc) == 0 {
		return nil
	}
	m := make(map[string]int64, len(pc))
	for name, n := range pc {
		m[name] = n.Load()
	}
	return map[string]any{"simulated_pings": m}
}

// build turns the flags into checks, and counts the pings of the simulated
// ones in pings; the error names the flag, the value and the fix.
func (f checkFlags) build(start time.Time, pings pingCounts) ([]health.Check, error) {
	var out []health.Check
	var errs []error
	add := func(flag string, specs []string, make func(spec health.Check, arg string) (health.Check, error)) {
		for _, spec := range specs {
			name, arg, critical, err := splitSpec(spec, flag == "check-http")
			if err == nil {
				var c health.Check
				c, err = make(health.Check{Name: name, Critical: critical}, arg)
				if err == nil {
					out = append(out, c)
					continue
				}
			}
			errs = append(errs, fmt.Errorf("--%s=%q: %w", flag, spec, err))
		}
	}
	add("simulate-check", f.simulate, func(spec health.Check, mode string) (health.Check, error) {
		fn, err := simulated(mode, start)
		if err != nil {
			return spec, err
		}
		n := new(atomic.Int64)
		pings[spec.Name] = n
		spec.Func = func(ctx context.Context) error {
			n.Add(1)
			return fn(ctx)
		}
		return spec, nil
	})
	add("check-tcp", f.tcp, func(spec health.Check, addr string) (health.Check, error) {
		if !strings.Contains(addr, ":") {
			return spec, errors.New("want HOST:PORT, such as db=127.0.0.1:5432")
		}
		return checks.TCPDial(spec, addr), nil
	})
	add("check-http", f.http, func(spec health.Check, url string) (health.Check, error) {
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			return spec, errors.New("want an http:// or https:// URL, such as api=http://127.0.0.1:9000/healthz")
		}
		return checks.HTTPGet(spec, url, nil), nil
	})
	add("check-dns", f.dns, func(spec health.Check, host string) (health.Check, error) {
		if host == "" {
			return spec, errors.New("want a host name, such as dns=example.internal")
		}
		return checks.DNSLookup(spec, host, nil), nil
	})
	return out, errors.Join(errs...)
}

// splitSpec splits NAME=ARG[,critical]. An option after the last comma
// other than "critical" is an error that names it and the one choice; for
// --check-http (lax), a comma followed by anything but a bare word belongs
// to the URL.
func splitSpec(spec string, lax bool) (name, arg string, critical bool, err error) {
	name, arg, ok := strings.Cut(spec, "=")
	if !ok || name == "" || arg == "" {
		return "", "", false, errors.New("want NAME=VALUE[,critical]")
	}
	if i := strings.LastIndexByte(arg, ','); i >= 0 {
		opt := arg[i+1:]
		switch {
		case opt == "critical":
			arg, critical = arg[:i], true
		case !lax || isWord(opt):
			return "", "", false, fmt.Errorf("unknown option %q after the comma; the only option is critical (NAME=VALUE,critical)", opt)
		}
		if arg == "" {
			return "", "", false, errors.New("want NAME=VALUE[,critical]: the value before the comma is empty")
		}
	}
	return name, arg, critical, nil
}

// isWord reports whether s is a bare word: letters only, possibly empty.
func isWord(s string) bool {
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
			return false
		}
	}
	return true
}

// simulated returns a check that behaves as mode says: ok, fail,
// slow=DURATION, wedge (ignores its context and never returns), panic, or
// flap=DURATION (fails, then passes, alternating every DURATION from start).
func simulated(mode string, start time.Time) (func(context.Context) error, error) {
	kind, arg, _ := strings.Cut(mode, "=")
	const modes = "ok, fail, slow=DURATION, wedge, panic or flap=DURATION"
	dur := func() (time.Duration, error) {
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%s needs a positive Go duration, such as %s=200ms", kind, kind)
		}
		return d, nil
	}
	switch kind {
	case "ok":
		return func(context.Context) error { return nil }, nil
	case "fail":
		return func(context.Context) error { return errors.New("simulated failure") }, nil
	case "slow":
		d, err := dur()
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return ctxtime.Sleep(ctx, d) }, nil
	case "wedge":
		return func(context.Context) error { select {} }, nil
	case "panic":
		return func(context.Context) error { panic("simulated panic") }, nil
	case "flap":
		d, err := dur()
		if err != nil {
			return nil, err
		}
		return func(context.Context) error {
			if int(time.Since(start)/d)%2 == 0 {
				return errors.New("simulated flap: failing phase")
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("unknown mode %q; the modes are %s", mode, modes)
}

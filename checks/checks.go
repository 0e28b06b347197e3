// Package checks provides ready-made readiness checks that need only the
// standard library: a TCP dial, an HTTP GET, a DNS lookup and a
// database/sql ping.
//
// Each constructor has the shape of every ready-made check of lameduck's,
// here and in the contrib modules (ldpgx.Check, ldredis.Check, ...): it
// takes spec, a health.Check that carries the name, Critical, Timeout and
// MaxAge, then what to check, and returns spec with its Func set (any Func
// spec held is replaced), ready for Lifecycle.AddCheck:
//
//	err := lc.AddCheck(checks.TCPDial(health.Check{Name: "sidecar", Critical: true}, "127.0.0.1:15000"))
//
// The Func is a plain func(ctx context.Context) error, so it also serves
// where a function is wanted, such as a startup task:
// lc.AddStartupTask("dial db", checks.TCPDial(health.Check{}, addr).Func).
//
// Each Func honours ctx: it returns soon after ctx is done, with an error
// that wraps ctx's error, so a check that the health engine reports as
// "timeout" has also stopped its work. None starts a goroutine that
// outlives a call, none caches a result, and each is safe for concurrent
// use (the engine never calls one check twice at once anyway).
//
// Errors built here begin "lameduck:" and name what was checked; errors from
// the standard library (a refused dial, a failed lookup) are returned as
// they are, since they already do. The health engine redacts credentials
// from error text before it reaches a probe body.
package checks

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/lameduck/lameduck/health"
)

// TCPDial returns spec with its Func set to a check that opens a TCP
// connection to addr ("host:port", as for net.Dial) and closes it at once.
// It proves the dependency's socket accepts connections, no more. A
// malformed addr makes every call return an error that names it.
func TCPDial(spec health.Check, addr string) health.Check {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		err = fmt.Errorf("lameduck: checks.TCPDial(%q): %w; use host:port, such as \"127.0.0.1:6379\"", addr, err)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	spec.Func = func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return spec
}

// maxDrain is how much of a response body HTTPGet reads before closing it,
// so that a keep-alive connection can be reused; 64 KiB.
const maxDrain = 64 << 10

// HTTPGet returns spec with its Func set to a check that sends GET rawURL
// and succeeds on any 2xx or 3xx status. Any other status is an error naming it:
// "lameduck: GET http://svc/healthz: 503 Service Unavailable".
//
// client nil means a client of HTTPGet's own that uses
// http.DefaultTransport and does not follow redirects (a 3xx is an answer,
// and therefore a pass). A non-nil client is used as it is, redirect policy
// included; its Timeout, if any, applies on top of ctx. The request carries
// ctx, so the check returns when ctx is done. The URL is parsed once: an
// invalid one, or one without an http or https scheme and a host, makes
// every call return an error that names it (with its password hidden).
func HTTPGet(spec health.Check, rawURL string, client *http.Client) health.Check {
	u, err := url.Parse(rawURL)
	if err == nil && (u.Scheme != "http" && u.Scheme != "https" || u.Host == "") {
		err = errors.New("not an absolute http:// or https:// URL")
	}
	if err != nil {
		shown := rawURL
		if u != nil {
			shown = u.Redacted()
		}
		err = fmt.Errorf("lameduck: checks.HTTPGet(%q): %w; use an absolute URL such as \"http://127.0.0.1:8080/healthz\"", shown, err)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	if client == nil {
		// A transport of its own without keep-alives: every ping dials
		// afresh (which is what a readiness check should prove), and no
		// idle connection's goroutines outlive the call.
		client = &http.Client{
			Transport:     &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	target := u.String()
	spec.Func = func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "lameduck-readiness-check")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
		_ = resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 399 {
			return fmt.Errorf("lameduck: GET %s: %s", u.Redacted(), resp.Status)
		}
		return nil
	}
	return spec
}

// DNSLookup returns spec with its Func set to a check that resolves host
// with resolver (nil means net.DefaultResolver) and succeeds when it yields at least one address.
// It proves name resolution works from the pod (CoreDNS reachable, the
// name exists), which a dependency reached by name needs first. An empty
// host makes every call return an error.
func DNSLookup(spec health.Check, host string, resolver *net.Resolver) health.Check {
	if host == "" {
		err := errors.New(`lameduck: checks.DNSLookup(""): the host is empty; name a host, such as "db.default.svc.cluster.local"`)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	spec.Func = func(ctx context.Context) error {
		addrs, err := resolver.LookupHost(ctx, host)
		if err != nil {
			return err
		}
		if len(addrs) == 0 {
			return fmt.Errorf("lameduck: lookup %s: no addresses", host)
		}
		return nil
	}
	return spec
}

// SQLPing returns spec with its Func set to a check that calls
// db.PingContext: it takes a connection
// from db's pool (opening one if none is idle) and asks the driver to
// verify it, so it fails when the database is unreachable or db is closed.
// Whether the driver honours ctx mid-ping is the driver's business; the
// health engine's deadline applies either way. A nil db makes every call
// return an error.
func SQLPing(spec health.Check, db *sql.DB) health.Check {
	if db == nil {
		err := errors.New("lameduck: checks.SQLPing(nil): the *sql.DB is nil; pass the pool the application uses")
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	spec.Func = db.PingContext
	return spec
}

package health_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lameduck/lameduck/health"
)

// Under Info.HideDetails every format and path shows names and outcome
// words only: no host, port, database name or gate reason reaches a body,
// while the status word and code stay what they were; the log keeps the
// redacted detail.
func TestHideDetailsEveryFormat(t *testing.T) {
	logs := &logBuf{}
	c := health.NewChecker(health.CheckerOptions{Logger: logs.logger()})
	secret := "dial tcp db-primary.internal:5432: database orders: connection refused (postgres://app:hunter2@db-primary.internal:5432/orders)"
	mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return errors.New(secret) }})
	mustAdd(t, c, health.Check{Name: "cache", Func: func(context.Context) error { return errors.New("redis 10.0.0.9:6379 /var/run/redis.sock refused") }})
	mustAdd(t, c, health.Check{Name: "boom", Func: func(context.Context) error { panic("at /srv/app/secret.go: 10.1.2.3") }})
	if err := c.AddGate(health.Gate{Name: "leader", Func: func() health.GateResult {
		return health.GateResult{Applicable: true, OK: false, Reason: "lease held by pod 10.0.0.5"}
	}}); err != nil {
		t.Fatal(err)
	}
	leaks := []string{"db-primary", "5432", "orders", "hunter2", "10.0.0", "6379", "/var/run", "secret.go", "10.1.2.3", "lease held"}
	for _, hide := range []bool{true, false} {
		info := &health.Info{Version: "v1", Commit: "c", HideDetails: hide}
		for _, tc := range []struct{ target, accept, path, word string }{
			{"/readyz", "", "", `"db":"error"`},
			{"/readyz?verbose", "", "", "[-]db failed: error\n"},
			{"/readyz", "application/health+json", "", `"output":"error"`},
			{"/readyz/db", "", "db", `"db":"error"`},
			{"/readyz/db?verbose", "", "db", "[-]db failed: error\n"},
			{"/readyz/db", "application/health+json", "db", `"output":"error"`},
			{"/readyz/boom", "", "boom", `"boom":"panic"`},
			{"/readyz/leader?verbose", "", "leader", "[-]leader failed\n"},
			{"/readyz?exclude=db", "", "", `"cache":"error"`},
		} {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("GET", tc.target, nil)
			if tc.accept != "" {
				r.Header.Set("Accept", tc.accept)
			}
			c.ServeReadiness(rec, r, info, tc.path, map[string]any{"phase": "serving"})
			body := rec.Body.String()
			if rec.Code != 503 && !strings.Contains(tc.target, "exclude") && !strings.Contains(tc.target, "boom") {
				t.Errorf("hide=%v %s: code %d, want 503", hide, tc.target, rec.Code)
			}
			for _, leak := range leaks {
				if hide && strings.Contains(body, leak) {
					t.Errorf("hide: %s (Accept %q) leaks %q: %s", tc.target, tc.accept, leak, body)
				}
			}
			if hide && !strings.Contains(body, tc.word) {
				t.Errorf("hide: %s (Accept %q) = %s; want %q", tc.target, tc.accept, body, tc.word)
			}
			if !hide && tc.path == "db" && !strings.Contains(body, "db-primary.internal:5432") {
				t.Errorf("shown: %s = %s; want the redacted detail", tc.target, body)
			}
			if strings.Contains(body, "hunter2") {
				t.Errorf("%s: password in a body: %s", tc.target, body)
			}
		}
	}
	if !strings.Contains(logs.String(), "db-primary.internal:5432") || strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the log must keep the redacted detail:\n%s", logs)
	}
}

// A healthy report is not copied: the word is the whole text.
func TestWithoutDetailsNoCopy(t *testing.T) {
	rep := health.Report{Status: health.StatusOK, Checks: map[string]string{"db": "ok"},
		Results: []health.Result{{Name: "db", Outcome: health.OutcomeOK, Text: "ok"}}}
	if n := testing.AllocsPerRun(100, func() { _ = rep.WithoutDetails() }); n != 0 {
		t.Errorf("WithoutDetails of a healthy report: %v allocs, want 0", n)
	}
	failing := health.Report{Status: health.StatusFailed, Checks: map[string]string{"db": "error: x:1"},
		Results: []health.Result{{Name: "db", Outcome: health.OutcomeError, Text: "error: x:1", Critical: true}}}
	got := failing.WithoutDetails()
	if got.Checks["db"] != "error" || got.Results[0].Text != "error" || failing.Checks["db"] != "error: x:1" || failing.Results[0].Text != "error: x:1" {
		t.Errorf("WithoutDetails = %+v; original %+v", got, failing)
	}
}

// A long ?exclude= list from the client costs linear time and a bounded
// echo: at most 16 unmatched names, each cut to 64 bytes.
func TestExcludeFloodBounded(t *testing.T) {
	c := readinessChecker(t)
	var q strings.Builder
	q.WriteString("/readyz?verbose")
	for i := range 50000 {
		q.WriteString("&exclude=x")
		q.WriteString(strings.Repeat("y", i%200))
		q.WriteString(string(rune('a' + i%26)))
	}
	rec := serve(c, "GET", q.String(), "", "")
	if rec.Code != 200 || rec.Body.Len() > 4096 {
		t.Fatalf("%d, body %d bytes: %.300s", rec.Code, rec.Body.Len(), rec.Body)
	}
	rec = serve(c, "GET", "/readyz/"+strings.Repeat("z", 100000), "", strings.Repeat("z", 100000))
	if rec.Code != 404 || rec.Body.Len() > 1024 {
		t.Fatalf("/readyz/<100 kB name>: %d, body %d bytes", rec.Code, rec.Body.Len())
	}
}

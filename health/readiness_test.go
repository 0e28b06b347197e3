package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/lameduck/lameduck/health"
)

func readinessChecker(t *testing.T) *health.Checker {
	t.Helper()
	c := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	mustAdd(t, c, health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return nil }})
	mustAdd(t, c, health.Check{Name: "cache", Func: func(context.Context) error { return errors.New("connection refused") }})
	if err := c.AddGate(health.Gate{Name: "consensus", Func: func() health.GateResult {
		return health.GateResult{Applicable: false, Reason: "not enabled"}
	}}); err != nil {
		t.Fatal(err)
	}
	return c
}

func serve(c *health.Checker, method, target, accept, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	c.ServeReadiness(rec, r, &health.Info{Version: "v1.2.0", Commit: "a984b10"}, path, map[string]any{"phase": "serving"})
	return rec
}

func TestServeReadinessJSON(t *testing.T) {
	c := readinessChecker(t)
	rec := serve(c, "GET", "/readyz", "", "")
	want := `{"status":"degraded","version":"v1.2.0","commit":"a984b10","phase":"serving",` +
		`"checks":{"cache":"error: connection refused","consensus":"skipped: not enabled","db":"ok"}}` + "\n"
	if rec.Code != 200 || rec.Body.String() != want {
		t.Fatalf("%d %s\nwant %s", rec.Code, rec.Body, want)
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store", "Vary": "Accept"} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	// /readyz/db: that check alone.
	rec = serve(c, "GET", "/readyz/db", "", "db")
	want = `{"status":"ok","version":"v1.2.0","commit":"a984b10","phase":"serving","checks":{"db":"ok"}}` + "\n"
	if rec.Code != 200 || rec.Body.String() != want {
		t.Fatalf("/readyz/db: %d %s", rec.Code, rec.Body)
	}
	// A leading slash is tolerated.
	if rec := serve(c, "GET", "/readyz/db", "", "/db"); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"checks":{"db":"ok"}`) {
		t.Fatalf("path /db: %d %s", rec.Code, rec.Body)
	}
	// ?exclude, repeatable.
	rec = serve(c, "GET", "/readyz?exclude=cache&exclude=consensus", "", "")
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"status":"ok"`) || !strings.Contains(rec.Body.String(), `"checks":{"db":"ok"}`) {
		t.Fatalf("exclude: %d %s", rec.Code, rec.Body)
	}
}

func TestServeReadinessVerbose(t *testing.T) {
	c := readinessChecker(t)
	rec := serve(c, "GET", "/readyz?verbose&exclude=consensus", "", "")
	want := "[-]cache failed: error: connection refused\n[+]db ok\n[+]consensus excluded: ok\nreadyz check passed\n"
	if rec.Code != 200 || rec.Body.String() != want {
		t.Fatalf("%d\n%s\nwant\n%s", rec.Code, rec.Body, want)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	// A critical failure fails, and a gate failure reads "failed: <reason>".
	c2 := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	mustAdd(t, c2, health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return errors.New("refused") }})
	if err := c2.AddGate(health.Gate{Name: "consensus", Func: func() health.GateResult {
		return health.GateResult{Applicable: true, Reason: "latest block is 0"}
	}}); err != nil {
		t.Fatal(err)
	}
	rec = serve(c2, "GET", "/readyz?verbose=1", "", "")
	want = "[-]consensus failed: latest block is 0\n[-]db failed: error: refused\nreadyz check failed\n"
	if rec.Code != 503 || rec.Body.String() != want {
		t.Fatalf("%d\n%s\nwant\n%s", rec.Code, rec.Body, want)
	}
}

func TestServeReadinessHealthJSON(t *testing.T) {
	c := readinessChecker(t)
	rec := serve(c, "GET", "/readyz", "application/json;q=0.5, application/health+json", "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != health.MediaTypeHealthJSON {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc struct {
		Status    string `json:"status"`
		Version   string `json:"version"`
		ReleaseID string `json:"releaseId"`
		Output    string `json:"output"`
		Phase     string `json:"phase"`
		Checks    map[string][]struct {
			ComponentType string `json:"componentType"`
			Status        string `json:"status"`
			Output        string `json:"output"`
			Time          string `json:"time"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if doc.Status != "warn" || doc.Version != "v1.2.0" || doc.ReleaseID != "a984b10" || doc.Output != "degraded" || doc.Phase != "serving" {
		t.Fatalf("envelope %+v", doc)
	}
	timeRE := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for name, want := range map[string]struct{ typ, status, output string }{
		"db":        {"component", "pass", ""},
		"cache":     {"component", "warn", "error: connection refused"},
		"consensus": {"system", "pass", ""},
	} {
		got := doc.Checks[name]
		if len(got) != 1 || got[0].ComponentType != want.typ || got[0].Status != want.status || got[0].Output != want.output || !timeRE.MatchString(got[0].Time) {
			t.Errorf("checks.%s = %+v, want %+v", name, got, want)
		}
	}
	// q=0 refuses the type: plain JSON.
	if rec := serve(c, "GET", "/readyz", "application/health+json;q=0", ""); rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("q=0 answered %q", rec.Header().Get("Content-Type"))
	}
	// A critical failure is "fail" with a 503.
	c2 := health.NewChecker(health.CheckerOptions{Logger: quiet()})
	mustAdd(t, c2, health.Check{Name: "db", Critical: true, Func: func(context.Context) error { return errors.New("refused") }})
	rec = serve(c2, "GET", "/readyz", health.MediaTypeHealthJSON, "")
	if rec.Code != 503 || !strings.HasPrefix(rec.Body.String(), `{"status":"fail",`) ||
		!strings.Contains(rec.Body.String(), `"db":[{"componentType":"component","status":"fail","output":"error: refused"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestServeReadinessUnknownMethodHead(t *testing.T) {
	c := readinessChecker(t)
	rec := serve(c, "GET", "/readyz/nope", "", "nope")
	var doc struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Known  []string `json:"known"`
		Phase  string   `json:"phase"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || rec.Code != 404 {
		t.Fatalf("%d %s %v", rec.Code, rec.Body, err)
	}
	if doc.Status != "not found" || strings.Join(doc.Known, ",") != "cache,consensus,db" || !strings.Contains(doc.Error, `"nope"`) || doc.Phase != "serving" {
		t.Fatalf("%+v", doc)
	}
	rec = serve(c, "GET", "/readyz?exclude=nope&verbose", "", "")
	if rec.Code == 404 || !strings.Contains(rec.Body.String(), `warn: some health checks cannot be excluded: no matches for "nope"`) {
		t.Fatalf("an unknown ?exclude must be ignored with a warning: %d %q", rec.Code, rec.Body)
	}
	if rec := serve(c, "GET", "/readyz/a/b", "", "a/b"); rec.Code != 404 {
		t.Fatalf("nested path: %d", rec.Code)
	}
	if rec := serve(c, "POST", "/readyz", "", ""); rec.Code != 405 || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d %q", rec.Code, rec.Header().Get("Allow"))
	}
	for _, accept := range []string{"", health.MediaTypeHealthJSON} {
		for _, target := range []string{"/readyz", "/readyz?verbose"} {
			rec := serve(c, "HEAD", target, accept, "")
			if rec.Code != 200 || rec.Body.Len() != 0 || rec.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("HEAD %s %s: %d body %q", target, accept, rec.Code, rec.Body)
			}
		}
	}
}

// The caller's short-circuit (draining, starting) comes in the format asked
// for, through WriteNegotiated.
func TestWriteNegotiatedShortCircuit(t *testing.T) {
	info := &health.Info{Version: "v1", Commit: "c"}
	draining := health.Report{Status: health.StatusDraining, Fields: map[string]any{"phase": "draining"}}
	for _, tc := range []struct {
		target, accept, ctype, body string
	}{
		{"/readyz", "", "application/json", `{"status":"draining","version":"v1","commit":"c","phase":"draining"}` + "\n"},
		{"/readyz?verbose", "", "text/plain; charset=utf-8", "[-]draining\nreadyz check failed\n"},
		{"/readyz", health.MediaTypeHealthJSON, health.MediaTypeHealthJSON,
			`{"status":"fail","version":"v1","releaseId":"c","output":"draining","phase":"draining"}` + "\n"},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", tc.target, nil)
		if tc.accept != "" {
			r.Header.Set("Accept", tc.accept)
		}
		health.WriteNegotiated(rec, r, info, draining)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Content-Type") != tc.ctype || rec.Body.String() != tc.body {
			t.Errorf("%s %s: %d %q %q\nwant %q", tc.target, tc.accept, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tc.body)
		}
	}
	// Judged from Checks alone (no Results): a failure is [-] and "fail".
	rep := health.Report{Status: health.StatusFailed, Checks: map[string]string{"b": "timeout: no answer within 1s", "a": "ok"}}
	if got := string(health.RenderVerbose(rep)); got != "[+]a ok\n[-]b failed: timeout: no answer within 1s\nreadyz check failed\n" {
		t.Errorf("verbose from Checks: %q", got)
	}
	if got := string(health.RenderHealthJSON(nil, rep)); !strings.Contains(got, `"b":[{"componentType":"component","status":"fail","output":"timeout: no answer within 1s"}]`) {
		t.Errorf("health+json from Checks: %s", got)
	}
}

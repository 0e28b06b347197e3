package lameduck_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lameduck/lameduck"
)

// call sends one request to h and returns the code and the body's status
// and maintenance fields.
func call(t *testing.T, h http.Handler, method, path, token string) (code int, status string, on bool) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set(lameduck.PreStopTokenHeader, token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body struct {
		Status      string `json:"status"`
		Maintenance bool   `json:"maintenance"`
	}
	if method != http.MethodHead {
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, path, rec.Body, err)
		}
	}
	return rec.Code, body.Status, body.Maintenance
}

// The maintenance switch takes a serving pod out of rotation and brings it
// back: /readyz 503 "maintenance" while it is on, 200 after, /healthz 200
// throughout, nothing drained; each change is one log line (the second is
// timed on the bubble's clock); a call without the token changes nothing;
// from the drain on the switch answers 409 and readiness stays draining.
func TestMaintenanceSwitch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const token = "s3cret-token-long-enough"
		lc, logs := newLifecycle(t, lameduck.Config{
			ShutdownDelay:    time.Second,
			ShutdownTeardown: 5 * time.Second,
			Maintenance:      true,
			PreStopToken:     token,
		})
		addFakeServer(t, lc)
		done := make(chan error, 1)
		go func() { done <- lc.Run(context.Background()) }()
		<-lc.Events().StartupDone.Done()
		h := lc.ProbeHandler()
		expect := func(what, method, path, tok string, wantCode int, wantStatus string) {
			t.Helper()
			if code, st, _ := call(t, h, method, path, tok); code != wantCode || st != wantStatus {
				t.Errorf("%s: %s %s = %d %q; want %d %q", what, method, path, code, st, wantCode, wantStatus)
			}
		}
		expect("serving", "GET", "/readyz", "", 200, "ok")
		expect("no token", "POST", "/maintenance/on", "", 401, "unauthorized")
		expect("wrong token", "POST", "/maintenance/on", "guess", 401, "unauthorized")
		expect("after refused calls", "GET", "/readyz", "", 200, "ok")
		expect("GET on a switch", "GET", "/maintenance/on", token, 405, "method not allowed")
		expect("state", "GET", "/maintenance", token, 200, "ok")

		expect("on", "POST", "/maintenance/on", token, 200, "maintenance")
		expect("on again", "POST", "/maintenance/on", token, 200, "maintenance")
		expect("in maintenance", "GET", "/readyz", "", 503, "maintenance")
		expect("in maintenance", "GET", "/healthz", "", 200, "ok")
		if code, st, on := call(t, h, "GET", "/maintenance", token); code != 200 || st != "maintenance" || !on {
			t.Errorf("state in maintenance: %d %q maintenance=%v", code, st, on)
		}
		if on, since := lc.Maintenance(); !on || since.IsZero() {
			t.Errorf("Maintenance() = %v, %v; want on, since set", on, since)
		}
		if lc.Events().ShutdownInitiated.Fired() || lc.Phase() != lameduck.PhaseServing {
			t.Fatalf("the switch drained: phase %s", lc.Phase())
		}
		time.Sleep(90 * time.Second)
		expect("still in maintenance", "GET", "/readyz", "", 503, "maintenance")
		expect("off", "POST", "/maintenance/off", token, 200, "ok")
		expect("back", "GET", "/readyz", "", 200, "ok")
		if n := strings.Count(logs.String(), "maintenance on —"); n != 1 {
			t.Errorf("%d 'maintenance on' lines; want 1 (a second on changes nothing)", n)
		}
		if !strings.Contains(logs.String(), "lameduck: maintenance off after 1m30s — /readyz answers its checks again") {
			t.Errorf("the log does not time the maintenance")
		}
		if !strings.Contains(logs.String(), "refused: missing or wrong X-Lameduck-Token header; nothing changed") || strings.Contains(logs.String(), token) {
			t.Errorf("refused calls: want one line, never the token")
		}

		// From the drain on: readiness is draining whatever the switch says,
		// and the switch changes nothing.
		expect("on before the drain", "POST", "/maintenance/on", token, 200, "maintenance")
		lc.BeginShutdown("test")
		synctest.Wait()
		expect("draining", "GET", "/readyz", "", 503, "draining")
		expect("off while draining", "POST", "/maintenance/off", token, 409, "draining")
		expect("draining", "GET", "/healthz", "", 200, "ok")
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
	})
}

// No anonymous switch on a public port: without a token it is refused at
// New unless ProbeAddr gives it a listener of its own, and then the
// application's listener does not serve it (404).
func TestMaintenanceNeedsTokenOnSharedListener(t *testing.T) {
	refusedWithoutToken(t, "MAINTENANCE", "Config.Maintenance", lameduck.Config{Maintenance: true})
	lc, err := newFromEnv(t, map[string]string{"LAMEDUCK_MAINTENANCE": "true", "LAMEDUCK_PROBE_ADDR": "127.0.0.1:0"}, lameduck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := call(t, lc.ProbeHandler(), "POST", "/maintenance/on", ""); code != 404 {
		t.Errorf("no token, probes on their own port: the application's listener answers the switch %d; want 404", code)
	}
	if on, _ := lc.Maintenance(); on {
		t.Error("the switch turned on")
	}
	lc, err = newFromEnv(t, map[string]string{"LAMEDUCK_MAINTENANCE": "true", "LAMEDUCK_PRESTOP_TOKEN": "s3cret-token-long-enough"}, lameduck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := call(t, lc.ProbeHandler(), "POST", "/maintenance/on", ""); code != 401 {
		t.Errorf("with a token, no header: %d; want 401", code)
	}
	// Off by default: the paths are the application's.
	lc, err = newFromEnv(t, nil, lameduck.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := call(t, lc.ProbeHandler(), "POST", "/maintenance/on", ""); code != 404 {
		t.Errorf("switch off by default: %d; want 404", code)
	}
}

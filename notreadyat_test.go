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

// readyz asks lc's probe handler for /readyz and returns the code and the
// body's status and not_ready_at.
func readyz(t *testing.T, lc *lameduck.Lifecycle) (code int, status, notReadyAt string) {
	t.Helper()
	rec := httptest.NewRecorder()
	lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var body struct {
		Status     string `json:"status"`
		NotReadyAt string `json:"not_ready_at"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET /readyz body %q: %v", rec.Body, err)
	}
	return rec.Code, body.Status, body.NotReadyAt
}

// LAMEDUCK_NOT_READY_AT says when readiness turns 503: at the signal (the
// default, for the whole window), or at the teardown, answering 200
// draining through the window (docs/probes-and-shutdown.md, "When
// readiness turns 503"). The log lines say which, at the signal and at the
// teardown. /healthz stays 200 throughout.
func TestNotReadyAtSaysWhenReadinessTurns503(t *testing.T) {
	for _, tc := range []struct {
		env        string // LAMEDUCK_NOT_READY_AT; "" the default
		windowCode int
		signalLog  string
		teardown   string
	}{
		{"", 503, "draining — /readyz now 503, waiting 5s", "lameduck: teardown — closing listeners"},
		{"signal", 503, "draining — /readyz now 503, waiting 5s", "lameduck: teardown — closing listeners"},
		{"Teardown", 200, "draining — /readyz stays 200 until the teardown (LAMEDUCK_NOT_READY_AT=teardown), waiting 5s", "lameduck: teardown — /readyz now 503, closing listeners"},
	} {
		t.Run("NOT_READY_AT="+tc.env, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vars := map[string]string{}
				if tc.env != "" {
					vars["LAMEDUCK_NOT_READY_AT"] = tc.env
				}
				lc, logs := newLifecycle(t, lameduck.Config{
					ShutdownDelay:    5 * time.Second,
					ShutdownTeardown: 10 * time.Second,
					LookupEnv:        env(vars),
				})
				teardown := make(chan struct{})
				hold := make(chan struct{})
				if err := lc.AddTeardownHook("look", func(context.Context) error {
					close(teardown)
					<-hold
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				// A listener, so the probes are served and the log may
				// speak of /readyz.
				addFakeServer(t, lc)
				done := make(chan error, 1)
				go func() { done <- lc.Run(context.Background()) }()
				<-lc.Events().StartupDone.Done()
				if code, st, _ := readyz(t, lc); code != 200 || st != "ok" {
					t.Fatalf("serving: /readyz %d %s; want 200 ok", code, st)
				}
				lc.BeginShutdown("test")
				synctest.Wait()
				for _, at := range []time.Duration{0, 4 * time.Second} {
					if at > 0 {
						time.Sleep(at)
						synctest.Wait()
					}
					code, st, nra := readyz(t, lc)
					want := ""
					if tc.windowCode == 200 {
						want = "teardown"
					}
					if code != tc.windowCode || st != "draining" || nra != want {
						t.Errorf("%s into the window: /readyz %d %s not_ready_at=%q; want %d draining not_ready_at=%q", at, code, st, nra, tc.windowCode, want)
					}
				}
				<-teardown
				if code, st, _ := readyz(t, lc); code != 503 || st != "draining" {
					t.Errorf("teardown: /readyz %d %s; want 503 draining", code, st)
				}
				rec := httptest.NewRecorder()
				lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
				if rec.Code != 200 {
					t.Errorf("teardown: /healthz %d; want 200", rec.Code)
				}
				close(hold)
				if err := <-done; err != nil {
					t.Fatalf("Run = %v", err)
				}
				for _, want := range []string{tc.signalLog, tc.teardown} {
					if !strings.Contains(logs.String(), want) {
						t.Errorf("the log has no %q", want)
					}
				}
			})
		})
	}
}

// A value that is neither signal nor teardown is a startup error naming
// the setting, the value and the accepted values.
func TestNotReadyAtRefusesAnotherValue(t *testing.T) {
	_, err := lameduck.New(lameduck.Config{IgnoreSignals: true, LookupEnv: env(map[string]string{"LAMEDUCK_NOT_READY_AT": "window"})})
	if err == nil || !strings.Contains(err.Error(), `LAMEDUCK_NOT_READY_AT="window"`) ||
		!strings.Contains(err.Error(), "signal") || !strings.Contains(err.Error(), "teardown") {
		t.Fatalf("New = %v; want the setting, its value and the accepted values named", err)
	}
}

// The default is chosen by what the pod knows: teardown inside Kubernetes
// (the EndpointSlice takes a terminating pod out whatever its readiness),
// signal elsewhere (readiness is the balancer's only signal); the
// environment and the code override it.
func TestNotReadyAtDefaultFollowsTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		code string
		want string
	}{
		{map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "", lameduck.NotReadyAtTeardown},
		{map[string]string{"LAMEDUCK_ENV": "kubernetes"}, "", lameduck.NotReadyAtTeardown},
		{nil, "", lameduck.NotReadyAtSignal},
		{map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "LAMEDUCK_NOT_READY_AT": "SIGNAL"}, "", lameduck.NotReadyAtSignal},
		{map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, lameduck.NotReadyAtSignal, lameduck.NotReadyAtSignal},
		{nil, lameduck.NotReadyAtTeardown, lameduck.NotReadyAtTeardown},
	} {
		lc, err := lameduck.New(lameduck.Config{IgnoreSignals: true, LookupEnv: env(tc.vars), NotReadyAt: tc.code})
		if err != nil {
			t.Fatal(err)
		}
		if got := lc.Config().NotReadyAt; got != tc.want {
			t.Errorf("env %v, code %q: NotReadyAt %q; want %q", tc.vars, tc.code, got, tc.want)
		}
	}
}

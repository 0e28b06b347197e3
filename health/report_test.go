package health_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/lameduck/lameduck/health"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRenderEnvelope(t *testing.T) {
	info := &health.Info{Version: "v1.2.0", Commit: "a984b10", Fields: func() map[string]any {
		return map[string]any{"mode": "cloud", "status": "hijacked", "version": "nope"}
	}}
	got := string(health.Render(info, health.Report{
		Status: health.StatusDegraded,
		Fields: map[string]any{"phase": "serving", "mode": "override"},
		Checks: map[string]string{"s3": "error: connection refused", "mongo": "ok"},
	}))
	want := `{"status":"degraded","version":"v1.2.0","commit":"a984b10","mode":"override","phase":"serving","checks":{"mongo":"ok","s3":"error: connection refused"}}` + "\n"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatal(err)
	}
}

func TestRenderUnencodableField(t *testing.T) {
	got := health.Render(&health.Info{}, health.Report{Status: health.StatusOK, Fields: map[string]any{"f": func() {}}})
	var v map[string]any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("body is not JSON: %s", got)
	}
	if v["status"] != "ok" {
		t.Fatalf("status lost: %s", got)
	}
}

func TestHandlerMethodsAndHeaders(t *testing.T) {
	calls := 0
	h := health.Handler(&health.Info{Version: "v1", Commit: "c"}, func(*http.Request) health.Report {
		calls++
		return health.Report{Status: health.StatusDraining}
	})
	for _, tc := range []struct {
		method   string
		code     int
		wantBody bool
	}{
		{"GET", 503, true},
		{"HEAD", 503, false},
		{"POST", 405, true},
		{"DELETE", 405, true},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, "/readyz", nil))
		if rec.Code != tc.code {
			t.Errorf("%s: code %d, want %d", tc.method, rec.Code, tc.code)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.method, ct)
		}
		if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("%s: Cache-Control %q", tc.method, cc)
		}
		if (rec.Body.Len() > 0) != tc.wantBody {
			t.Errorf("%s: body %q", tc.method, rec.Body)
		}
		if tc.code == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: Allow %q", tc.method, rec.Header().Get("Allow"))
		}
	}
	if calls != 2 {
		t.Fatalf("probe called %d times, want 2 (GET and HEAD only)", calls)
	}
}

func TestStatusCodes(t *testing.T) {
	for s, code := range map[health.Status]int{
		health.StatusOK: 200, health.StatusDegraded: 200, health.StatusFailed: 503,
		health.StatusStarting: 503, health.StatusDraining: 503, "bogus": 503,
	} {
		if s.Code() != code {
			t.Errorf("%s.Code() = %d, want %d", s, s.Code(), code)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	setting := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		bi              *debug.BuildInfo
		ok              bool
		version, commit string
	}{
		{"no build info", nil, false, "unknown", "unknown"},
		{"module version and clean commit",
			&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: setting("vcs.revision", "abc123", "vcs.modified", "false")},
			true, "v1.2.3", "abc123"},
		{"dirty work tree",
			&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: setting("vcs.revision", "abc123", "vcs.modified", "true")},
			true, "(devel)", "abc123-dirty"},
		{"no VCS stamping", &debug.BuildInfo{Main: debug.Module{Version: ""}, Settings: setting("vcs.modified", "true")},
			true, "unknown", "unknown"},
	} {
		if v, c := health.FromBuildInfo(tc.bi, tc.ok); v != tc.version || c != tc.commit {
			t.Errorf("%s: version, commit = %q, %q; want %q, %q", tc.name, v, c, tc.version, tc.commit)
		}
	}
	// The running test binary: whatever it carries, never empty words.
	if v, c := health.BuildInfo(); v == "" || c == "" {
		t.Errorf("BuildInfo() = %q, %q; want non-empty words", v, c)
	}
}

func TestPanickingFieldsNeverBreakAProbe(t *testing.T) {
	info := &health.Info{Fields: func() map[string]any { panic("nil map") }}
	rec := httptest.NewRecorder()
	health.Handler(info, func(*http.Request) health.Report { return health.Report{Status: health.StatusOK} }).
		ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"fields_error":"panic in Info.Fields"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote\back`, "<script>&", "\x00\x01\b\f\n\r\t\x1f\x7f", "é ü 日本",
		"\u2028\u2029", "bad \xff\xfe utf8", "mixed \xe2\x28\xa1 <>&"} {
		checkJSONString(t, s)
	}
}

func FuzzJSONStringMatchesEncodingJSON(f *testing.F) {
	f.Add("a\"b<c>\u2028\xff")
	f.Fuzz(checkJSONString)
}

func checkJSONString(t *testing.T, s string) {
	want, _ := json.Marshal(map[string]string{"k": s})
	got := health.Render(&health.Info{}, health.Report{Status: "x", Checks: map[string]string{"k": s}})
	wantBody := `{"status":"x","version":"","commit":"","checks":` + string(want) + "}\n"
	if string(got) != wantBody {
		t.Fatalf("Render of %q:\n got %s\nwant %s", s, got, wantBody)
	}
}

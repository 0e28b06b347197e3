package main

// `lameduck vet`, end to end: the real binary on the chart's renderings
// (kept identical to `helm template` by deploy/helm/render), the plain
// manifests, and fixtures that break each rule.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// vetRun runs `lameduck vet ARGS` with stdin and returns stdout, stderr
// and the exit code.
func vetRun(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(lameduckBin, append([]string{"vet"}, args...)...)
	cmd.Env = childEnv(nil)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

// vetRules returns the rule ids `lameduck vet --format json` reports for
// paths, sorted, and the exit code.
func vetRules(t *testing.T, paths ...string) ([]string, int) {
	t.Helper()
	out, stderr, code := vetRun(t, "", append([]string{"--format", "json"}, paths...)...)
	var rep struct {
		Findings []struct {
			Rule    string `json:"rule"`
			Message string `json:"message"`
			Fix     string `json:"fix"`
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("vet %v: exit %d, stdout not JSON: %v\n%s\n%s", paths, code, err, out, stderr)
	}
	var ids []string
	for _, f := range rep.Findings {
		if f.Message == "" || f.Fix == "" {
			t.Errorf("finding %+v has no message or no fix", f)
		}
		ids = append(ids, f.Rule)
	}
	slices.Sort(ids)
	return ids, code
}

// TestVetCleanManifests: what the project ships passes.
func TestVetCleanManifests(t *testing.T) {
	for _, p := range []string{"../../deploy/k8s", "../../deploy/helm/rendered/default.yaml",
		"../../deploy/helm/rendered/idle.yaml", "../../deploy/helm/rendered/prestop-http.yaml",
		"../../deploy/helm/rendered/worker.yaml", "../../deploy/helm/rendered/worker-deletion-cost.yaml"} {
		if ids, code := vetRules(t, p); code != 0 || len(ids) != 0 {
			t.Errorf("vet %s: exit %d, findings %v; want clean", p, code, ids)
		}
	}
	// helm template | lameduck vet -
	out, _, code := vetRun(t, mustRead(t, "../../deploy/helm/rendered/default.yaml"), "-")
	if code != 0 || !strings.Contains(out, "lameduck vet: clean in 1 container(s)") {
		t.Errorf("vet - on the default rendering: exit %d\n%s", code, out)
	}
}

// TestVetBrokenFixtures: each broken manifest fails with the right rule ids.
func TestVetBrokenFixtures(t *testing.T) {
	for _, c := range []struct {
		path string
		want []string
	}{
		{"../../deploy/helm/rendered/broken-grace.yaml", []string{"grace-period"}},
		{"../../deploy/helm/rendered/broken-prestop-sleep.yaml", []string{"prestop-sleep"}},
		{"../../deploy/helm/rendered/broken-probes.yaml", []string{"readiness-timeout"}},
		{"../../deploy/helm/rendered/broken-worker-grace.yaml", []string{"runner-grace"}},
		{"testdata/vet/settings.yaml", []string{"lameduck-setting", "lameduck-setting", "lameduck-setting"}},
		{"testdata/vet/probes.yaml", []string{"liveness-path", "readiness-path"}},
		{"testdata/vet/startup.yaml", []string{"startup-probe", "startup-probe"}},
		{"testdata/vet/prestop.yaml", []string{"grace-period", "prestop-hook", "prestop-sleep"}},
		{"testdata/vet/runner.yaml", []string{"autoscaler-grace", "grace-env", "liveness-path", "runner-grace"}},
		{"testdata/vet/grpc.yaml", []string{"liveness-path", "probes-swapped", "readiness-timeout"}},
		{"testdata/vet/sleep.yaml", []string{"grace-period", "grace-period", "grace-period", "prestop-sleep", "prestop-sleep", "prestop-sleep", "prestop-sleep"}},
		{"testdata/vet/overflow.yaml", []string{"grace-period", "prestop-sleep", "readiness-window"}},
		{"testdata/vet/defaults.yaml", []string{"grace-period", "liveness-path", "readiness-path"}},
		{"testdata/vet/pairs.yaml", []string{"probes-identical", "probes-identical", "probes-swapped"}},
		{"testdata/vet/ports.yaml", []string{"probe-port", "probe-port", "probe-port", "probe-port", "probe-port", "probe-port", "probe-port"}},
		{"testdata/vet/window.yaml", []string{"readiness-window", "readiness-window"}},
		{"testdata/vet/sidecar.yaml", []string{"pod-grace"}},
		{"testdata/vet/runner-readiness.yaml", []string{"readiness-path"}},
		{"testdata/vet/pdb.yaml", []string{"pdb-unhealthy-eviction", "pdb-unhealthy-eviction"}},
		{"testdata/vet/autoscaler.yaml", []string{"autoscaler-grace", "autoscaler-grace"}},
		{"testdata/vet/mesh.yaml", []string{"mesh-drain", "mesh-drain", "mesh-drain", "mesh-drain"}},
		{"testdata/vet/liveness-throttle.yaml", []string{"liveness-throttle", "liveness-throttle"}},
		{"testdata/vet/last-endpoint.yaml", []string{"last-endpoint", "last-endpoint", "last-endpoint", "last-endpoint"}},
	} {
		ids, code := vetRules(t, c.path)
		if code != 1 || !slices.Equal(ids, c.want) {
			t.Errorf("vet %s: exit %d, rules %v; want exit 1, rules %v", c.path, code, ids, c.want)
		}
	}
}

// TestVetFixedFixtures: each rule's broken fixture reports the rule with
// its numbers as JSON numbers, and the same manifest with the fix applied
// (testdata/vet/*-fixed.yaml) is clean.
func TestVetFixedFixtures(t *testing.T) {
	for _, c := range []struct {
		broken, fixed, rule string
		numbers             []string // keys of values that are JSON numbers in every finding
	}{
		{"testdata/vet/pdb.yaml", "testdata/vet/pdb-fixed.yaml", "pdb-unhealthy-eviction", nil},
		{"testdata/vet/last-endpoint.yaml", "testdata/vet/last-endpoint-fixed.yaml", "last-endpoint", nil},
		{"testdata/vet/autoscaler.yaml", "testdata/vet/autoscaler-fixed.yaml", "autoscaler-grace",
			[]string{"window_seconds", "teardown_seconds", "total_seconds", "cap_seconds", "over_seconds", "grace_seconds", "spot_notice_seconds"}},
		{"testdata/vet/mesh.yaml", "testdata/vet/mesh-fixed.yaml", "mesh-drain",
			[]string{"proxy_seconds", "prestop_seconds", "window_seconds", "teardown_seconds", "total_seconds", "short_seconds", "want_seconds"}},
		{"testdata/vet/liveness-throttle.yaml", "testdata/vet/liveness-throttle-fixed.yaml", "liveness-throttle",
			[]string{"timeout_seconds", "failure_threshold", "tolerance_seconds", "cpu_limit_cores", "work_core_seconds", "want_seconds", "want_timeout_seconds"}},
	} {
		rep, code := vetJSON(t, "", c.broken)
		if code != 1 || len(rep.Findings) == 0 {
			t.Errorf("vet %s: exit %d, %d finding(s); want exit 1 with %s", c.broken, code, len(rep.Findings), c.rule)
		}
		for _, f := range rep.Findings {
			if f.Rule != c.rule {
				t.Errorf("%s:%d: %s; want only %s", f.File, f.Line, f.Rule, c.rule)
			}
			for _, k := range c.numbers {
				if _, ok := f.Values[k].(float64); !ok {
					t.Errorf("%s at %s:%d: values[%q] = %#v; want a number", f.Rule, f.File, f.Line, k, f.Values[k])
				}
			}
		}
		if ids, code := vetRules(t, c.fixed); code != 0 || len(ids) != 0 {
			t.Errorf("vet %s: exit %d, findings %v; want clean", c.fixed, code, ids)
		}
	}
	// A budget is a number (or a percentage's text).
	rep, _ := vetJSON(t, "", "testdata/vet/pdb.yaml")
	if len(rep.Findings) != 2 || rep.Findings[0].Values["max_unavailable"] != float64(1) || rep.Findings[1].Values["min_available"] != float64(1) {
		t.Errorf("pdb.yaml: findings %+v; want the budgets as numbers", rep.Findings)
	}
	// The rolling update's budget as the API resolves it, as numbers.
	rep, _ = vetJSON(t, "", "testdata/vet/last-endpoint.yaml")
	if len(rep.Findings) != 4 || rep.Findings[1].Values["replicas"] != float64(1) || rep.Findings[1].Values["max_surge"] != float64(0) ||
		rep.Findings[1].Values["max_unavailable"] != float64(1) || rep.Findings[2].Values["window_seconds"] != float64(5) ||
		rep.Findings[3].Values["external_traffic_policy"] != "Local" {
		t.Errorf("last-endpoint.yaml: findings %+v; want the replicas, surge, unavailable and window as numbers", rep.Findings)
	}
}

// TestVetGraceFinding: the finding a new user sees after breaking the grace
// period in the chart's values: the numbers, and the fix.
func TestVetGraceFinding(t *testing.T) {
	out, _, code := vetRun(t, "", "../../deploy/helm/rendered/broken-grace.yaml")
	want := []string{
		`Deployment/lameduck-demo container "demo": error [grace-period]`,
		"delay 5s + teardown 30s = 35s > terminationGracePeriodSeconds 20",
		"fix: lower LAMEDUCK_SHUTDOWN_DELAY or LAMEDUCK_SHUTDOWN_TEARDOWN, or raise terminationGracePeriodSeconds to at least 35s",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("exit %d; output lacks %q:\n%s", code, w, out)
		}
	}
}

// TestVetHelpNamesEveryRule: `lameduck vet --help` lists each rule id.
func TestVetHelpNamesEveryRule(t *testing.T) {
	out, _, code := vetRun(t, "", "--help")
	for _, id := range []string{"lameduck-setting", "grace-period", "runner-grace", "pod-grace", "grace-env", "liveness-path",
		"readiness-path", "probes-identical", "probes-swapped", "probe-port", "readiness-timeout", "readiness-window",
		"readiness-max-age", "startup-probe", "prestop-sleep", "prestop-hook", "pdb-unhealthy-eviction", "autoscaler-grace", "mesh-drain", "liveness-throttle", "last-endpoint"} {
		if !strings.Contains(out, id) {
			t.Errorf("exit %d: --help lacks the rule %s:\n%s", code, id, out)
		}
	}
	if !strings.Contains(out, "3 when\nno container was judged") {
		t.Errorf("--help does not give the exit code when no container was judged:\n%s", out)
	}
}

// TestVetSARIF: the SARIF log names every rule and locates each result.
func TestVetSARIF(t *testing.T) {
	out, _, code := vetRun(t, "", "--format", "sarif", "testdata/vet/probes.yaml")
	var log struct {
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Rules []struct {
						ID string `json:"id"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				Level     string `json:"level"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region struct {
							StartLine int `json:"startLine"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	if code != 1 || log.Version != "2.1.0" || len(log.Runs) != 1 || len(log.Runs[0].Tool.Driver.Rules) < 10 || len(log.Runs[0].Results) != 2 {
		t.Fatalf("exit %d, SARIF %+v", code, log)
	}
	for _, r := range log.Runs[0].Results {
		if r.Level != "error" || len(r.Locations) != 1 || r.Locations[0].PhysicalLocation.ArtifactLocation.URI != "testdata/vet/probes.yaml" {
			t.Errorf("result %+v", r)
		}
	}
}

// TestVetUnreadableInput: exit 2 when the input cannot be read.
func TestVetUnreadableInput(t *testing.T) {
	for _, c := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"testdata/vet/no-such-file.yaml"}},
		{"kind: Deployment\nspec: [not, a, spec]\n", []string{"-"}},
		{"\tnot yaml: [", nil},
		{"", []string{"-"}}, // a failed `helm template … |` hands over nothing
		{"---\n# only a comment\n", nil},
	} {
		_, stderr, code := vetRun(t, c.stdin, c.args...)
		if code != 2 || !strings.Contains(stderr, "lameduck:") {
			t.Errorf("vet %v: exit %d, stderr %q; want exit 2 and the reason", c.args, code, stderr)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// vetReport is `lameduck vet --format json`.
type vetReport struct {
	Summary struct {
		Containers int    `json:"containers"`
		Skipped    int    `json:"skipped"`
		Verdict    string `json:"verdict"`
	} `json:"summary"`
	Findings []struct {
		Rule    string         `json:"rule"`
		File    string         `json:"file"`
		Line    int            `json:"line"`
		Field   string         `json:"field"`
		Message string         `json:"message"`
		Values  map[string]any `json:"values"`
	} `json:"findings"`
	Judged []struct {
		Container string   `json:"container"`
		Signs     []string `json:"signs"`
	} `json:"judged"`
	Skipped []struct {
		Container string `json:"container"`
		Reason    string `json:"reason"`
	} `json:"skipped"`
}

func vetJSON(t *testing.T, stdin string, args ...string) (vetReport, int) {
	t.Helper()
	out, stderr, code := vetRun(t, stdin, append([]string{"--format", "json"}, args...)...)
	var rep vetReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("vet %v: exit %d, stdout not JSON: %v\n%s\n%s", args, code, err, out, stderr)
	}
	return rep, code
}

// TestVetDefaultsOnly is the manifest a new user writes: lameduck with its
// defaults (no LAMEDUCK_* variable), liveness on /readyz and a 5s grace
// period. It was reported "clean in 0 container(s)" with exit 0; it is
// judged by its probes, with the binary's own Kubernetes defaults, and
// each finding is at the line of its field, with its numbers.
func TestVetDefaultsOnly(t *testing.T) {
	const path = "testdata/vet/defaults.yaml"
	lines := strings.Split(mustRead(t, path), "\n")
	lineOf := func(prefix string) int {
		for i, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return i + 1
			}
		}
		t.Fatalf("%s has no line %q", path, prefix)
		return 0
	}
	for _, stdin := range []bool{false, true} {
		var rep vetReport
		var code int
		if stdin {
			rep, code = vetJSON(t, mustRead(t, path), "-")
		} else {
			rep, code = vetJSON(t, "", path)
		}
		if code != 1 || rep.Summary.Containers != 1 || rep.Summary.Verdict != "findings" || len(rep.Judged) != 1 ||
			!slices.Contains(rep.Judged[0].Signs, "livenessProbe is httpGet /readyz, a path lameduck serves") {
			t.Fatalf("stdin %v: exit %d, summary %+v, judged %+v; want exit 1 and one container judged by its liveness probe", stdin, code, rep.Summary, rep.Judged)
		}
		at := map[string]int{}
		for _, f := range rep.Findings {
			at[f.Rule] = f.Line
			if f.Rule == "grace-period" {
				if f.Values["total_seconds"] != 27.0 || f.Values["grace_seconds"] != 5.0 || f.Values["window_seconds"] != 5.0 ||
					f.Values["teardown_seconds"] != 22.0 || f.Values["prestop_seconds"] != 0.0 || f.Field != "spec.template.spec.terminationGracePeriodSeconds" {
					t.Errorf("grace-period: values %v, field %q; want total 27, grace 5, window 5, teardown 22, preStop 0 as numbers", f.Values, f.Field)
				}
			}
		}
		if at["grace-period"] != lineOf("terminationGracePeriodSeconds:") || at["liveness-path"] != lineOf("livenessProbe:") ||
			at["readiness-path"] != lineOf("- name: app") {
			t.Errorf("stdin %v: lines %v; want grace-period at %d, liveness-path at %d, readiness-path at %d", stdin, at,
				lineOf("terminationGracePeriodSeconds:"), lineOf("livenessProbe:"), lineOf("- name: app"))
		}
	}
	out, _, _ := vetRun(t, "", path)
	if !strings.Contains(out, "delay 5s + teardown 22s = 27s > terminationGracePeriodSeconds 5") || strings.Contains(out, "clean") {
		t.Errorf("text output:\n%s", out)
	}
}

// TestVetNothingJudged: a manifest with nothing lameduck in it is never
// reported clean: stdout says what was skipped and why, and the exit code
// is 3 in every format.
func TestVetNothingJudged(t *testing.T) {
	const path = "testdata/vet/nothing.yaml"
	out, _, code := vetRun(t, "", path)
	if code != 3 || strings.Contains(out, "clean") || !strings.Contains(out, `container "nginx": skipped: nothing says it runs lameduck`) ||
		!strings.Contains(out, "judged no container, so nothing was checked") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
	rep, code := vetJSON(t, "", path)
	if code != 3 || rep.Summary.Verdict != "nothing judged" || rep.Summary.Containers != 0 || len(rep.Skipped) != 1 || rep.Skipped[0].Container != "nginx" {
		t.Errorf("json: exit %d, %+v", code, rep)
	}
	sarif, _, code := vetRun(t, "", "--format", "sarif", path)
	if code != 3 || !strings.Contains(sarif, `"executionSuccessful": false`) || !strings.Contains(sarif, "judged no container") {
		t.Errorf("sarif: exit %d\n%s", code, sarif)
	}
	// Only a Service: no workload at all.
	out, _, code = vetRun(t, "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}]}\n", "-")
	if code != 3 || strings.Contains(out, "clean") || !strings.Contains(out, "hold no workload") {
		t.Errorf("a Service alone: exit %d\n%s", code, out)
	}
	// Named with --container, the same nginx is judged (with lameduck's
	// defaults): its readiness on / is a finding, not a skip.
	if rep, code := vetJSON(t, "", "--container", "nginx", path); code != 1 || rep.Summary.Containers != 1 || len(rep.Skipped) != 0 {
		t.Errorf("--container nginx: exit %d, %+v", code, rep)
	}
	// --skip: a container that shows a sign (a probe on /readyz) is not judged.
	if out, _, code := vetRun(t, "", "--skip", "app", "testdata/vet/defaults.yaml"); code != 3 || !strings.Contains(out, "skipped: named with --skip") {
		t.Errorf("--skip app: exit %d\n%s", code, out)
	}
}

// TestVetFindingLines: every finding of every fixture points at the line
// of the field it names (or, for an absent field, of its closest parent),
// not at the first line of its document.
func TestVetFindingLines(t *testing.T) {
	paths, err := filepath.Glob("testdata/vet/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, "../../deploy/helm/rendered/broken-grace.yaml", "../../deploy/helm/rendered/broken-probes.yaml")
	last := regexp.MustCompile(`([A-Za-z]+)(\[\d+\])?$`)
	for _, p := range paths {
		rep, _ := vetJSON(t, "", p)
		lines := strings.Split(mustRead(t, p), "\n")
		for _, f := range rep.Findings {
			m := last.FindStringSubmatch(f.Field)
			if m == nil || f.Line < 1 || f.Line > len(lines) {
				t.Errorf("%s: %s at line %d, field %q: no field or no such line", p, f.Rule, f.Line, f.Field)
				continue
			}
			want := m[1] + ":" // a mapping key
			if m[2] != "" {
				want = "name:" // an entry of containers or env
			}
			if !strings.Contains(lines[f.Line-1], want) {
				t.Errorf("%s:%d: %s about %s, but the line is %q", p, f.Line, f.Rule, f.Field, lines[f.Line-1])
			}
		}
	}
}

// TestVetOrderAndNumbers: the findings of several files come out in one
// order on every run (file, then line), and each carries its numbers as
// JSON numbers, also as SARIF result properties.
func TestVetOrderAndNumbers(t *testing.T) {
	args := []string{"testdata/vet/window.yaml", "testdata/vet/sidecar.yaml", "testdata/vet/ports.yaml", "testdata/vet/pairs.yaml"}
	first, _, _ := vetRun(t, "", append([]string{"--format", "json"}, args...)...)
	for range 3 {
		if again, _, _ := vetRun(t, "", append([]string{"--format", "json"}, args...)...); again != first {
			t.Fatalf("two runs differ:\n%s\n---\n%s", first, again)
		}
	}
	rep, _ := vetJSON(t, "", args...)
	for i := 1; i < len(rep.Findings); i++ {
		a, b := rep.Findings[i-1], rep.Findings[i]
		if a.File == b.File && a.Line > b.Line {
			t.Errorf("%s:%d comes before line %d", a.File, a.Line, b.Line)
		}
	}
	numbers := map[string][]string{
		"readiness-window": {"window_seconds", "period_seconds", "failure_threshold", "timeout_seconds", "detect_seconds"},
		"pod-grace":        {"total_seconds", "grace_seconds", "over_seconds"},
		"probe-port":       {},
	}
	for _, f := range rep.Findings {
		for _, k := range numbers[f.Rule] {
			if _, ok := f.Values[k].(float64); !ok {
				t.Errorf("%s at %s:%d: values[%q] = %#v; want a number", f.Rule, f.File, f.Line, k, f.Values[k])
			}
		}
	}
	sarif, _, _ := vetRun(t, "", "--format", "sarif", "testdata/vet/defaults.yaml")
	if !strings.Contains(sarif, `"total_seconds": 27`) || !strings.Contains(sarif, `"grace_seconds": 5`) {
		t.Errorf("SARIF lacks the grace finding's numbers:\n%s", sarif)
	}
}

// TestVetChartRenderingsOnStdin: what `helm template deploy/helm/lameduck-demo
// | lameduck vet -` prints for every values file the chart's tests render
// clean is clean (deploy/helm/render keeps the renderings identical to
// helm template).
func TestVetChartRenderingsOnStdin(t *testing.T) {
	for _, name := range []string{"default", "idle", "prestop-http", "worker", "worker-deletion-cost"} {
		out, _, code := vetRun(t, mustRead(t, "../../deploy/helm/rendered/"+name+".yaml"), "-")
		if code != 0 || !strings.Contains(out, "lameduck vet: clean in") {
			t.Errorf("helm template (%s) | lameduck vet -: exit %d\n%s", name, code, out)
		}
	}
}

// TestVetDocsExamples: every finding docs/vet.md shows ("FILE:LINE: OBJECT
// container ...: LEVEL [RULE]" and the lines under it) is what vet prints
// for that file.
func TestVetDocsExamples(t *testing.T) {
	doc := strings.Split(mustRead(t, "../../docs/vet.md"), "\n")
	head := regexp.MustCompile(`^((?:testdata/vet|deploy/helm/rendered)/[^:]+):\d+: `)
	outs := map[string]string{}
	n := 0
	for i, l := range doc {
		m := head.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		file := m[1]
		if _, ok := outs[file]; !ok {
			arg := file
			if strings.HasPrefix(file, "deploy/") {
				arg = "../../" + file
			}
			out, _, _ := vetRun(t, "", arg)
			outs[file] = strings.ReplaceAll(out, "../../deploy/", "deploy/")
		}
		block := []string{l}
		for _, next := range doc[i+1:] {
			if !strings.HasPrefix(next, "    ") || strings.TrimSpace(next) == "…" {
				break
			}
			block = append(block, next)
		}
		if !strings.Contains(outs[file], strings.Join(block, "\n")+"\n") {
			t.Errorf("docs/vet.md:%d shows\n%s\nbut vet %s prints\n%s", i+1, strings.Join(block, "\n"), file, outs[file])
		}
		n++
	}
	if n < 5 {
		t.Fatalf("found %d examples in docs/vet.md", n)
	}
}

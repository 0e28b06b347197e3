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
		"../../deploy/helm/rendered/worker.yaml"} {
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
		{"testdata/vet/runner.yaml", []string{"grace-env", "liveness-path", "runner-grace"}},
		{"testdata/vet/grpc.yaml", []string{"liveness-path", "liveness-path", "readiness-path", "readiness-timeout"}},
		{"testdata/vet/sleep.yaml", []string{"grace-period", "grace-period", "grace-period", "prestop-sleep", "prestop-sleep", "prestop-sleep", "prestop-sleep"}},
		{"testdata/vet/overflow.yaml", []string{"grace-period", "prestop-sleep"}},
	} {
		ids, code := vetRules(t, c.path)
		if code != 1 || !slices.Equal(ids, c.want) {
			t.Errorf("vet %s: exit %d, rules %v; want exit 1, rules %v", c.path, code, ids, c.want)
		}
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
	for _, id := range []string{"lameduck-setting", "grace-period", "runner-grace", "grace-env", "liveness-path",
		"readiness-path", "readiness-timeout", "readiness-max-age", "startup-probe", "prestop-sleep", "prestop-hook"} {
		if !strings.Contains(out, id) {
			t.Errorf("exit %d: --help lacks the rule %s:\n%s", code, id, out)
		}
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

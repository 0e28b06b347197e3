package kube_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lameduck/lameduck/e2e/kube/cluster"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// lameduckBin builds the lameduck command from this checkout, once.
func lameduckBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = osMkdirTemp()
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "lameduck")
		// As the demo image is built, which already compiled every package.
		binErr = cluster.BuildShipped(context.Background(), repo, binPath, "./cmd/lameduck")
	})
	if binErr != nil {
		t.Fatalf("building lameduck: %v", binErr)
	}
	return binPath
}

// rolloutReport is the part of `lameduck rollout --format json` this test
// reads (docs/rollout.md has the whole shape).
type rolloutReport struct {
	Mode     string `json:"mode"`
	Requests int    `json:"requests"`
	Failed   int    `json:"failed"`
	Resent   int    `json:"resent"`
	Cluster  struct {
		KilledPods int `json:"killed_pods"`
	} `json:"cluster"`
	Pods []struct {
		Name              string   `json:"name"`
		DeletionRequested *float64 `json:"deletion_requested"`
		Exited            *float64 `json:"exited"`
		Killed            bool     `json:"killed"`
		Containers        []struct {
			ExitCode *int `json:"exit_code"`
		} `json:"containers"`
	} `json:"pods"`
}

// TestRolloutCommandOnTheCluster: `lameduck rollout` against the real
// cluster gives an operator's verdict from outside: exit 0 with 0 failed
// requests and no pod killed for the chart's demo, exit 1 with failures
// for the naive server, each pod's deletion and exit in the report. The
// naive server's load is POST /slow, a second in the handler, so requests
// are in flight at every SIGTERM: the test sees the verdict on a failure
// that always happens, not on a race that the naive server sometimes wins
// (2,607 requests over keep-alive to / and /echo, 0 failed, in one CI run).
func TestRolloutCommandOnTheCluster(t *testing.T) {
	needCluster(t)
	bin := lameduckBin(t)
	run := func(t *testing.T, e *env, deployment, url string, load ...string) (int, rolloutReport, string) {
		t.Helper()
		args := append([]string{"rollout", "--kubeconfig", cfg.Kubeconfig(), "--namespace", e.ns, "--url", url,
			"--rounds", "2", "--format", "json"}, load...)
		cmd := exec.Command(bin, append(args, "deployment/"+deployment)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var rep rolloutReport
		if jerr := json.Unmarshal(out, &rep); jerr != nil {
			t.Fatalf("lameduck rollout: %v (%v); stderr:\n%s\nstdout:\n%s", err, jerr, stderr.String(), out)
		}
		return exitCode(err), rep, stderr.String()
	}
	t.Run("the chart's demo", func(t *testing.T) {
		e := newEnv(t, "rollout-demo")
		e.helmInstall("lameduck-demo", nil)
		url := e.serviceURL("lameduck-demo")
		code, rep, stderr := run(t, e, "lameduck-demo", url)
		t.Logf("demo: exit %d, %d requests, %d failed, %d re-sent, %d pods killed", code, rep.Requests, rep.Failed, rep.Resent, rep.Cluster.KilledPods)
		if code != 0 || rep.Mode != "cluster" || rep.Failed != 0 || rep.Resent != 0 || rep.Cluster.KilledPods != 0 || rep.Requests < 1000 {
			t.Fatalf("lameduck rollout on the demo: exit %d, %+v; stderr:\n%s", code, rep, stderr)
		}
		stopped := 0
		for _, p := range rep.Pods {
			if p.DeletionRequested == nil {
				continue
			}
			stopped++
			if p.Exited == nil || p.Killed || len(p.Containers) == 0 || p.Containers[0].ExitCode == nil || *p.Containers[0].ExitCode != 0 {
				t.Errorf("pod %s: deleted, but its report shows no clean exit: %+v", p.Name, p)
			}
		}
		if stopped < 6 {
			t.Errorf("%d pods stopped in the report, want 6 (3 replicas, 2 rounds)", stopped)
		}
	})
	t.Run("the naive server", func(t *testing.T) {
		e := newEnv(t, "rollout-naive")
		e.deployNaive("naive")
		url := e.serviceURL("naive")
		code, rep, stderr := run(t, e, "naive", url, "--get", "", "--post", "/slow")
		t.Logf("naive: exit %d, %d requests, %d failed", code, rep.Requests, rep.Failed)
		if code != 1 || rep.Failed == 0 {
			t.Fatalf("lameduck rollout on the naive server: exit %d with %d failed, want 1 with failures; stderr:\n%s", code, rep.Failed, stderr)
		}
	})
}

package main

// `lameduck rollout`, end to end: the real binary drives real replicas (the
// demo, and the reference servers that shut down badly) through rolling
// restarts under load, and its JSON report and exit code are checked.
//
// Outcomes are made deterministic by whole seconds of margin, never by
// timing luck: the demo's lame-duck window (4s) is far longer than the
// balancer's endpoint-removal delay (at most 1s) and its readiness
// reaction (2 × 500ms), so a slow machine only makes every step later, not
// a request fail; the reference servers close their listener at least 1s
// before the balancer can forget them, so some of the load (hundreds of
// requests per second) must meet a closed port.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rolloutReport is the part of `lameduck rollout --format json` the tests
// read.
type rolloutReport struct {
	Requests       int            `json:"requests"`
	Failed         int            `json:"failed"`
	Failures       map[string]int `json:"failures"`
	Resent         int            `json:"resent"`
	FirstFailures  []any          `json:"first_failures"`
	ReplicaReports []struct {
		ID            int      `json:"id"`
		Port          int      `json:"port"`
		Ready         *float64 `json:"ready"`
		Requests      int      `json:"requests"`
		Sigterm       *float64 `json:"sigterm"`
		SigtermToExit *float64 `json:"sigterm_to_exit"`
		Stopped       *float64 `json:"stopped"`
		StopToExit    *float64 `json:"stop_to_exit"`
		ExitCode      int      `json:"exit_code"`
		Killed        bool     `json:"killed"`
	} `json:"replica_reports"`
}

// rolloutJSON runs `lameduck rollout --format json ARGS` and returns its
// report and exit code.
func rolloutJSON(t *testing.T, args ...string) (rolloutReport, int) {
	t.Helper()
	cmd := exec.Command(lameduckBin, append([]string{"rollout", "--format", "json"}, args...)...)
	cmd.Env = childEnv(nil)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep rolloutReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d; stdout is not a JSON report: %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	if t.Failed() || code > 1 {
		t.Logf("stderr:\n%s", stderr.String())
	}
	return rep, code
}

// fastProbes are the balancer settings of every test: a readiness poll
// every 500ms, out after two failures.
var fastProbes = []string{"--probe-period", "500ms", "--probe-failures", "2", "--probe-timeout", "2s", "--warmup", "500ms", "--cooldown", "500ms", "--timeout", "30s"}

// TestRolloutDemoDropsNothing is the promise of the whole project, in CI:
// three replicas of the demo, restarted twice each under a few hundred
// requests per second of GETs and POSTs, through an ingress (L7) and
// through kube-proxy (L4), and not one request fails.
func TestRolloutDemoDropsNothing(t *testing.T) {
	for _, mode := range []string{"l7", "l4"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			html := filepath.Join(t.TempDir(), "report.html")
			args := append([]string{"--mode", mode, "--replicas", "3", "--rounds", "2", "--rate", "300",
				"--removal-delay", "200ms-1s", "--report", html,
				"--env", "LAMEDUCK_SHUTDOWN_DELAY=4s", "--env", "LAMEDUCK_TERMINATION_GRACE=60s"}, fastProbes...)
			args = append(args, "--", lameduckBin, "demo", "--server", demoServer(t), "--addr", "127.0.0.1:{port}")
			rep, code := rolloutJSON(t, args...)
			if code != 0 || rep.Failed != 0 {
				t.Fatalf("exit %d, %d of %d requests failed: %v; first: %v", code, rep.Failed, rep.Requests, rep.Failures, rep.FirstFailures)
			}
			if rep.Requests < 500 {
				t.Errorf("only %d requests were sent; the load did not run", rep.Requests)
			}
			terminated := 0
			for _, r := range rep.ReplicaReports {
				if r.Sigterm == nil {
					// The last set: stopped at the end with SIGTERM and
					// allowed its drain, never SIGKILLed at once.
					if r.Stopped == nil || r.StopToExit == nil || r.ExitCode != 0 || r.Killed {
						t.Errorf("replica %d of the last set: stopped %v, stop→exit %v, exit code %d, killed %v; want SIGTERM at the end and a clean exit",
							r.ID, r.Stopped, r.StopToExit, r.ExitCode, r.Killed)
					} else if *r.StopToExit < 4 {
						t.Errorf("replica %d of the last set exited %.2fs after its SIGTERM, before its 4s window had passed", r.ID, *r.StopToExit)
					}
					continue
				}
				terminated++
				if r.SigtermToExit == nil || r.ExitCode != 0 || r.Killed {
					t.Errorf("replica %d: SIGTERM→exit %v, exit code %d, killed %v; want a clean exit", r.ID, r.SigtermToExit, r.ExitCode, r.Killed)
				} else if *r.SigtermToExit < 4 {
					t.Errorf("replica %d exited %.2fs after SIGTERM, before its 4s window had passed", r.ID, *r.SigtermToExit)
				}
			}
			if terminated != 6 {
				t.Errorf("%d replicas got SIGTERM; want 6 (3 replicas × 2 rounds)", terminated)
			}
			page, err := os.ReadFile(html)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"PASS: none of", "src=\"data:image/svg", "<img"} {
				if !bytes.Contains(page, []byte(want)) {
					t.Errorf("the HTML report lacks %q", want)
				}
			}
		})
	}
}

// TestRolloutCatchesBadShutdowns: the reference servers fail the same kind
// of run, and the tool says why (refused connections) and exits 1.
func TestRolloutCatchesBadShutdowns(t *testing.T) {
	for _, c := range []struct {
		name    string
		removal string
		extra   []string
	}{
		// Shutdown at SIGTERM: the port closes at once, the balancer forgets
		// the replica 1s or more later.
		{"naive", "1s-1500ms", nil},
		// preStop: sleep 2 in the server's stead, endpoint removal after 3s:
		// the sleep hides the race only while removal is faster.
		{"prestop-sleep", "3s-3500ms", []string{"--prestop-sleep", "2s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--mode", "l7", "--replicas", "2", "--rounds", "1", "--rate", "200",
				"--removal-delay", c.removal}, fastProbes...)
			args = append(args, "--", refserverBin, "--addr", "127.0.0.1:{port}")
			rep, code := rolloutJSON(t, append(args, c.extra...)...)
			if code != 1 {
				t.Errorf("exit %d; want 1 (requests failed)", code)
			}
			if rep.Failed == 0 || rep.Failures["refused"] == 0 {
				t.Fatalf("%d of %d requests failed (%v); want refused connections", rep.Failed, rep.Requests, rep.Failures)
			}
		})
	}
}

// TestRolloutCommandReadsPORT: a command that reads PORT (here a shell
// that passes $PORT on) needs no {port} in its arguments.
func TestRolloutCommandReadsPORT(t *testing.T) {
	args := append([]string{"--replicas", "1", "--rounds", "1", "--rate", "50", "--removal-delay", "0s",
		"--get", "/", "--post", ""}, fastProbes...)
	args = append(args, "--", "sh", "-c", `exec "$0" --addr "127.0.0.1:$PORT"`, refserverBin)
	rep, code := rolloutJSON(t, args...)
	if code == 2 || rep.Requests == 0 || len(rep.ReplicaReports) != 2 {
		t.Fatalf("exit %d, %d requests, %d replicas; want the rollout to run on $PORT", code, rep.Requests, len(rep.ReplicaReports))
	}
	for _, r := range rep.ReplicaReports {
		if r.Ready == nil || r.Requests == 0 {
			t.Errorf("replica %d (port %d): ready %v, %d requests; want it serving on its $PORT", r.ID, r.Port, r.Ready, r.Requests)
		}
	}
}

// TestRolloutUsage: a command line that cannot run exits 2 and says why.
func TestRolloutUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout"}, "no command"},
		{[]string{"rollout", "--start-timeout", "1s", "--", "sleep", "5"}, "does the command listen on {port} or $PORT"},
		{[]string{"rollout", "--stop-timeout", "-1s", "--", "x"}, "--stop-timeout=-1s"},
		// Flags of one mode are refused in the other, by name.
		{[]string{"rollout", "--replicas", "2", "--url", "http://127.0.0.1:1", "deployment/web"}, "--replicas is for local replicas"},
		{[]string{"rollout", "--url", "http://127.0.0.1:1", "--", "x"}, "--url is for a cluster"},
		{[]string{"rollout", "--namespace", "shop"}, "--namespace is for a cluster: name the Deployment too"},
		{[]string{"rollout", "deployment/web"}, "--url is required on a cluster"},
		{[]string{"rollout", "--url", "http://127.0.0.1:1", "deployment/web", "--", "x"}, "both a Deployment"},
		{[]string{"rollout", "--url", "http://127.0.0.1:1", "statefulset/db"}, "only a Deployment can be rolled out"},
		{[]string{"rollout", "--kubeconfig", "/nonexistent/kubeconfig", "--url", "http://127.0.0.1:1", "deployment/web"}, "--kubeconfig=/nonexistent/kubeconfig"},
		{[]string{"rollout", "--removal-delay", "3s-1s", "--", "x", "{port}"}, "--removal-delay"},
		{[]string{"rollout", "--mode", "l3", "--", "x", "{port}"}, "--mode"},
		{[]string{"rollout", "--start-timeout", "1s", "--", "false", "{port}"}, "exited with code 1 before it was ready"},
	} {
		cmd := exec.Command(lameduckBin, c.args...)
		cmd.Env = childEnv(nil)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("lameduck %s: %v, output %q; want exit 2 and %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runCLI runs the real binary with args and the LAMEDUCK_* variables in env
// (none other), and returns its stdout, stderr and exit code. A command
// line that should fail must do so before it listens, so a generous bound
// still catches one that started serving.
func runCLI(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(lameduckBin, args...)
	cmd.Env = childEnv(env)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("lameduck %s did not exit within %s; output:\n%s%s", strings.Join(args, " "), startTimeout, o.String(), e.String())
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// Usage errors exit 2, print one line per problem naming the flag, the
// value and the fix (or the choices), and end with a pointer to --help.
func TestCLIUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string // substrings of the error line(s)
		help string   // the command whose --help is pointed to
	}{
		{[]string{"demo", "--addr="}, []string{`--addr="": empty`, ":8080"}, "lameduck demo"},
		{[]string{"demo", "--addr", "localhost"}, []string{`--addr="localhost"`, "HOST:PORT"}, "lameduck demo"},
		{[]string{"demo", "--simulate-check", "db=ok,crit"},
			[]string{`--simulate-check="db=ok,crit"`, `unknown option "crit"`, "the only option is critical"}, "lameduck demo"},
		{[]string{"demo", "--simulate-check", "db=okk"},
			[]string{`--simulate-check="db=okk"`, `unknown mode "okk"`, "ok, fail, slow=DURATION, wedge, panic or flap=DURATION"}, "lameduck demo"},
		{[]string{"demo", "--simulate-check", "db=ok", "--simulate-check", "db=fail"}, []string{`"db"`}, "lameduck demo"},
		{[]string{"demo", "--log-format", "xml"}, []string{`--log-format="xml"`, `"text" or "json"`}, "lameduck demo"},
		{[]string{"demo", "--startup-delay", "abc"}, []string{`"abc"`, "--startup-delay"}, "lameduck demo"},
		{[]string{"demo", "--bogus"}, []string{"unknown flag: --bogus"}, "lameduck demo"},
		{[]string{"demo", "extra"}, []string{`"extra"`}, "lameduck demo"},
		{[]string{"bogus"}, []string{`unknown command "bogus"`}, "lameduck"},
		{[]string{"version", "extra"}, []string{`"extra"`}, "lameduck version"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runCLI(t, nil, tc.args...)
			if code != exitUsage {
				t.Errorf("exit code %d, want %d (a usage error)", code, exitUsage)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if last := lines[len(lines)-1]; last != "Run '"+tc.help+" --help' for usage." {
				t.Errorf("last line %q, want the pointer to %s --help; stderr:\n%s", last, tc.help, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("first line %q does not say %s", lines[0], w)
				}
			}
			if !strings.HasPrefix(lines[0], "lameduck: ") {
				t.Errorf("first line %q does not begin with lameduck:", lines[0])
			}
		})
	}
}

// Several problems at once: one line each, every one with its flag, then the
// pointer to --help; none carries an escaped newline.
func TestCLISeveralUsageErrorsOnePerLine(t *testing.T) {
	t.Parallel()
	_, stderr, code := runCLI(t, nil, "demo", "--addr=", "--startup-delay=-1s", "--log-format=xml",
		"--simulate-check", "db=ok,crit", "--check-tcp", "x=nohost")
	if code != exitUsage {
		t.Errorf("exit code %d, want %d", code, exitUsage)
	}
	want := []string{"--addr=", "--startup-delay=-1s", "--log-format=", "--simulate-check=", "--check-tcp=",
		"Run 'lameduck demo --help' for usage."}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d (one per problem, then the pointer):\n%s", len(lines), len(want), stderr)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q does not name %s", i+1, lines[i], w)
		}
		if strings.Contains(lines[i], `\n`) {
			t.Errorf("line %d carries an escaped newline: %q", i+1, lines[i])
		}
	}
}

// Several bad LAMEDUCK_* variables: exit 1 (the command line was fine), one
// ERROR line per variable with text logs, one record with an "errors" array
// with JSON logs; never an escaped newline.
func TestCLIConfigErrorsOnePerLine(t *testing.T) {
	t.Parallel()
	bad := map[string]string{"LAMEDUCK_SHUTDOWN_DELAY": "5", "LAMEDUCK_SHUTDOWN_TEARDOWN": "0s"}

	t.Run("text", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runCLI(t, bad, "demo", "--addr", "127.0.0.1:0")
		if code != exitFailure {
			t.Errorf("exit code %d, want %d", code, exitFailure)
		}
		var errLines []string
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			if strings.Contains(l, `\n`) {
				t.Errorf("a line carries an escaped newline: %q", l)
			}
			if strings.Contains(l, "level=ERROR") {
				errLines = append(errLines, l)
			}
		}
		if len(errLines) != 2 || !strings.Contains(errLines[0]+errLines[1], "LAMEDUCK_SHUTDOWN_DELAY") ||
			!strings.Contains(errLines[0]+errLines[1], "LAMEDUCK_SHUTDOWN_TEARDOWN") {
			t.Errorf("want one ERROR line per variable:\n%s", stderr)
		}
		if strings.Contains(stderr, "listening") {
			t.Errorf("the process got as far as listening:\n%s", stderr)
		}
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := runCLI(t, bad, "demo", "--addr", "127.0.0.1:0", "--log-format", "json")
		if code != exitFailure {
			t.Errorf("exit code %d, want %d", code, exitFailure)
		}
		var records []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("not a JSON line: %q", l)
			}
			if rec["level"] == "ERROR" {
				records = append(records, rec)
			}
		}
		if len(records) != 1 {
			t.Fatalf("%d ERROR records, want one carrying every error:\n%s", len(records), stderr)
		}
		errs, _ := records[0]["errors"].([]any)
		if len(errs) != 2 {
			t.Fatalf("errors = %v, want an array of 2", records[0]["errors"])
		}
		for i, name := range []string{"LAMEDUCK_SHUTDOWN_DELAY", "LAMEDUCK_SHUTDOWN_TEARDOWN"} {
			if s, _ := errs[i].(string); !strings.Contains(s, name) || strings.Contains(s, "\n") {
				t.Errorf("errors[%d] = %q, want one line naming %s", i, s, name)
			}
		}
	})
}

package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// demo-worker --deletion-cost outside a pod (no POD_NAME, POD_NAMESPACE)
// stops before it connects anywhere, exit 1, naming both variables and
// the fix; so does one without the in-cluster service account.
func TestDemoWorkerDeletionCostNeedsThePod(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want []string
	}{
		{nil, []string{"POD_NAMESPACE=", "POD_NAME=", "downward API"}},
		{map[string]string{"POD_NAME": "runner-0", "POD_NAMESPACE": "jobs"}, []string{"--deletion-cost", "service account token"}},
	} {
		cmd := exec.Command(lameduckBin, "demo-worker", "--deletion-cost", "--queue", "amqp", "--amqp", "amqp://127.0.0.1:1/")
		cmd.Env = childEnv(c.env)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("env %v: %v; want exit 1\n%s", c.env, err, out.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("env %v: the output lacks %q:\n%s", c.env, w, out.String())
			}
		}
		if strings.Contains(out.String(), "consuming") {
			t.Errorf("env %v: it started consuming:\n%s", c.env, out.String())
		}
	}
}

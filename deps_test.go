package lameduck_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The core module imports only the standard library in non-test code (the
// README's promise: a user who imports lameduck pulls no driver). Held with
// `go list -deps` over every package of the module, so a new import
// anywhere in the core fails here.
func TestCoreImportsOnlyTheStandardLibrary(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var foreign []string
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/lameduck/lameduck" && !strings.HasPrefix(p, "github.com/lameduck/lameduck/") {
			foreign = append(foreign, p)
		}
	}
	if len(foreign) > 0 {
		t.Fatalf("the core module's packages import non-standard packages: %v", foreign)
	}
}

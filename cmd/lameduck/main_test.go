package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// lameduckBin is the real binary, built once by TestMain, that the
// end-to-end tests run as a child process.
var lameduckBin string

// refserverBin is the reference server of testdata/refserver (a plain
// net/http server that shuts down with no lame-duck window), built by
// TestMain for the rollout tests.
var refserverBin string

// TestMain builds the command into a temporary directory, runs the tests,
// and then checks that no test left a goroutine behind (stderr readers,
// process waiters, HTTP transports): every goroutine is joined.
func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "lameduck-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// go test runs the test binary in the package's directory and puts
	// GOROOT/bin first on PATH, so this builds this very command with the
	// same toolchain, through the go.work at the repository's root, as the
	// Dockerfile builds it (shippedBuild).
	lameduckBin = filepath.Join(dir, "lameduck")
	if out, err := shippedBuild(lameduckBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build -o %s .: %v\n%s", lameduckBin, err, out)
		return 1
	}
	refserverBin = filepath.Join(dir, "refserver")
	if out, err := shippedBuild(refserverBin, "./testdata/refserver").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build -o %s ./testdata/refserver: %v\n%s", refserverBin, err, out)
		return 1
	}

	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on a successful test run: %v\n", err)
			code = 1
		}
	}
	return code
}

// shippedBuild is `go build -o out pkg` with the Dockerfile's flags
// (CGO_ENABLED=0, -trimpath, -ldflags='-s -w'): the tests run the binary
// as shipped, and the cluster suite's image build (e2e/kube/cluster) and
// this one share every compiled package in the Go build cache instead of
// compiling the command's dependencies once per set of flags. extra goes
// before -o.
func shippedBuild(out, pkg string, extra ...string) *exec.Cmd {
	args := append([]string{"build", "-trimpath", "-ldflags=-s -w"}, extra...)
	cmd := exec.Command("go", append(args, "-o", out, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

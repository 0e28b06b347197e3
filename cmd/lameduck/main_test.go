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
	// same toolchain, through the go.work at the repository's root.
	lameduckBin = filepath.Join(dir, "lameduck")
	build := exec.Command("go", "build", "-o", lameduckBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build -o %s .: %v\n%s", lameduckBin, err, out)
		return 1
	}
	refserverBin = filepath.Join(dir, "refserver")
	build = exec.Command("go", "build", "-o", refserverBin, "./testdata/refserver")
	if out, err := build.CombinedOutput(); err != nil {
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

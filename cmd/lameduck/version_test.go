package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildSettings reads the module version and the vcs.* settings of a built
// binary through `go version -m`, the toolchain's own reader.
func buildSettings(t *testing.T, bin string) (version string, settings map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m %s: %v\n%s", bin, err, out)
	}
	settings = map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			version = f[2]
		case len(f) == 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				settings[k] = v
			}
		}
	}
	return version, settings
}

// wantVersionText is what `lameduck version` must print for a binary with
// this build information.
func wantVersionText(version string, settings map[string]string) string {
	commit := "unknown"
	if rev := settings["vcs.revision"]; rev != "" {
		commit = rev
		if settings["vcs.modified"] == "true" {
			commit += "-dirty"
		}
	}
	return "lameduck " + version + "\n" +
		"commit   " + commit + "\n" +
		"go       " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
}

func runBin(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return o.String(), e.String(), code
}

// `lameduck version` and `lameduck --version` print the same three lines,
// read from the binary's build information: module version, commit (with
// vcs.modified as "-dirty"), Go version and platform. The test binary and
// the command are built by the same toolchain, so runtime.Version agrees.
func TestVersionCommandAndFlag(t *testing.T) {
	version, settings := buildSettings(t, lameduckBin)
	want := wantVersionText(version, settings)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, errOut, code := runBin(t, lameduckBin, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("lameduck %s: exit %d, stderr %q", args[0], code, errOut)
		}
		if out != want {
			t.Errorf("lameduck %s printed\n%s\nwant\n%s", args[0], out, want)
		}
	}
	if _, _, code := runBin(t, lameduckBin, "version", "extra"); code == 0 {
		t.Error("lameduck version extra: exit 0, want a usage error")
	}
}

// A binary built with VCS stamping from a checkout reports that checkout's
// commit, "-dirty" when the work tree has changes (the same rule as
// vcs.modified). Go stamps only inside a repository whose .git is a
// directory, so the test skips in a git worktree or an unpacked archive.
func TestVersionReportsCommit(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not a git checkout: nothing to stamp")
	}
	root := strings.TrimSpace(string(top))
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree (.git is a file): the go command does not stamp VCS information there")
	}
	bin := filepath.Join(t.TempDir(), "lameduck")
	if out, err := shippedBuild(bin, ".", "-buildvcs=true").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	version, settings := buildSettings(t, bin)
	if settings["vcs.revision"] != strings.TrimSpace(string(head)) {
		t.Fatalf("vcs.revision %q, HEAD %q", settings["vcs.revision"], head)
	}
	out, _, code := runBin(t, bin, "version")
	if want := wantVersionText(version, settings); code != 0 || out != want {
		t.Fatalf("lameduck version: exit %d\n%s\nwant\n%s", code, out, want)
	}
	if !strings.Contains(out, "commit   "+strings.TrimSpace(string(head))) {
		t.Fatalf("lameduck version does not name HEAD %s:\n%s", head, out)
	}
}

package lameduck_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// adoptMain is a user's service: the core and contrib/pgx, with pgx itself.
const adoptMain = `package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
	"github.com/lameduck/lameduck/health"
)

func main() {
	var pool *pgxpool.Pool
	c := ldpgx.Check(health.Check{Name: "db", Critical: true}, pool)
	fmt.Println("adopted", lameduck.DrainIdle, c.Name, c.Func(context.Background()) != nil)
}
`

// A fresh module outside the repository depends on this clone by the
// README's Install instructions alone — its "From a clone" commands, run as
// written with the clone's path for ../lameduck — imports the core and
// contrib/pgx, builds and runs, with the network off.
//
// Offline means GOPROXY=off: every module comes from the module cache
// (GOMODCACHE, the usual one), and the checksum database, a network service,
// is replaced by the clone's own go.sum files, copied into the new module's
// go.sum first (with the network on, go mod tidy asks sum.golang.org
// instead). The cache must already hold every module go mod tidy reads
// (see below for how the test makes sure of it); once it does, any failure
// of the README's commands fails the test.
func TestAdoptFromAClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module with pgx from the module cache: not in -short mode")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH (%v): the test runs the README's commands with it", err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh on PATH (%v): the test runs the README's commands with it", err)
	}
	clone, err := filepath.Abs(".") // the root package's directory is the clone's root
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(clone, "go.work")); err != nil {
		t.Skipf("%s has no go.work (%v): not a clone of the repository", clone, err)
	}
	if strings.Contains(clone, "'") {
		t.Skipf("the clone's path %q has a quote: the README's commands are run with it single-quoted", clone)
	}
	script := installCommands(t, filepath.Join(clone, "README.md"), clone)

	// Offline, every module comes from the cache, and go mod tidy needs more
	// than a build does: it loads the tests of every imported package,
	// those in other modules too (pgx's tests import testify), so a cache
	// filled only by builds of contrib/pgx may lack some. When the offline
	// run fails for a missing module, the test fills the cache once by the
	// same commands through the module proxy the environment names (the
	// checksum database off: that module is thrown away), and skips (fails
	// in CI) only when that proxy cannot be reached either. Then the offline
	// run is made again, and any failure of it fails the test.
	offline := adoptEnv("GOPROXY=off", "GOTOOLCHAIN=local", "GOFLAGS=")
	dir, out, err := adopt(t, goBin, sh, clone, script, offline)
	if err != nil && strings.Contains(out, "GOPROXY=off") {
		warm := adoptEnv("GOTOOLCHAIN=local", "GOFLAGS=", "GOSUMDB=off")
		if p := os.Getenv("GOPROXY"); p != "" {
			warm = append(warm, "GOPROXY="+p)
		}
		if _, wout, werr := adopt(t, goBin, sh, clone, script, warm); werr != nil {
			msg := fmt.Sprintf("the module cache lacks what go mod tidy needs for contrib/pgx and the module proxy "+
				"(GOPROXY=%q) could not supply it (%v): run this test once with the network on\n%s", os.Getenv("GOPROXY"), werr, wout)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		dir, out, err = adopt(t, goBin, sh, clone, script, offline)
	}
	if err != nil {
		t.Fatalf("adopting the clone offline by the README's commands: %v\n%s", err, out)
	}
	gomod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	for _, m := range []string{"github.com/lameduck/lameduck", "github.com/lameduck/lameduck/contrib/pgx"} {
		if !regexp.MustCompile(`(?m)^replace ` + regexp.QuoteMeta(m) + ` => ` + regexp.QuoteMeta(clone)).Match(gomod) {
			t.Errorf("go.mod has no replace of %s by the clone:\n%s", m, gomod)
		}
	}
	if !strings.Contains(out, "adopted idle db true") {
		t.Errorf("the built service printed no 'adopted idle db true':\n%s", out)
	}
}

// adopt makes a fresh module in a temporary directory, runs script (the
// README's commands) in it, then builds it with -mod=mod outside any
// workspace and runs the binary. It returns the module's directory and
// everything printed.
func adopt(t *testing.T, goBin, sh, clone, script string, env []string) (dir, out string, err error) {
	t.Helper()
	dir = t.TempDir()
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // a hang guard: a loaded machine compiles pgx in ~30s
	defer cancel()
	run := func(env []string, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &buf, &buf
		buf.WriteString("$ " + strings.Join(append([]string{filepath.Base(name)}, args...), " ") + "\n")
		return cmd.Run()
	}
	steps := []func() error{
		func() error { return os.WriteFile(filepath.Join(dir, "main.go"), []byte(adoptMain), 0o644) },
		func() error { return run(env, goBin, "mod", "init", "example.com/service") },
		func() error {
			// The new module must not sit inside a workspace (a TMPDIR
			// under the clone would put it in the clone's go.work).
			cmd := exec.CommandContext(ctx, goBin, "env", "GOWORK")
			cmd.Dir, cmd.Env = dir, env
			w, err := cmd.Output()
			if err == nil && strings.TrimSpace(string(w)) != "" {
				err = fmt.Errorf("%s is inside the workspace %s: set TMPDIR outside it", dir, strings.TrimSpace(string(w)))
			}
			return err
		},
		func() error { return seedSums(dir, clone) },
		func() error { return run(env, sh, "-ec", script) },
		func() error {
			return run(append(slices.Clone(env), "GOWORK=off", "GOFLAGS=-mod=mod"), goBin, "build", "-o", "service", ".")
		},
		func() error { return run(env, filepath.Join(dir, "service")) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return dir, buf.String(), err
		}
	}
	return dir, buf.String(), nil
}

// adoptEnv is the test's environment without the variables that would
// change how go resolves modules (a workspace, flags, a proxy, a
// toolchain), plus set.
func adoptEnv(set ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOWORK", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN":
			continue
		}
		env = append(env, kv)
	}
	return append(env, set...)
}

// seedSums writes the clone's go.sum lines (the core's and contrib/pgx's)
// into the new module's go.sum: offline, they stand in for the checksum
// database.
func seedSums(dir, clone string) error {
	var lines []string
	for _, f := range []string{"go.sum", "contrib/pgx/go.sum"} {
		b, err := os.ReadFile(filepath.Join(clone, f))
		if err != nil {
			return err
		}
		lines = append(lines, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	slices.Sort(lines)
	return os.WriteFile(filepath.Join(dir, "go.sum"), []byte(strings.Join(slices.Compact(lines), "\n")+"\n"), 0o644)
}

// installCommands returns the README Install section's commands for
// adopting a clone (the shell block that runs go mod edit), without its git
// clone line, with clone's path for ../lameduck.
func installCommands(t *testing.T, readme, clone string) string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Install\n")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("README.md has no ## Install section")
	}
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		if !strings.Contains(block[1], "go mod edit") {
			continue
		}
		var cmds []string
		for line := range strings.Lines(block[1]) {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "git clone ") {
				cmds = append(cmds, strings.ReplaceAll(line, "../lameduck", "'"+clone+"'"))
			}
		}
		return strings.Join(cmds, "\n")
	}
	t.Fatal("README.md's Install section has no shell block with go mod edit: the way to adopt a clone")
	return ""
}

package kubebuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// resolve writes and tidies a build module once: a go.sum left by a tidy
// that worked skips both next time, and a tidy that failed leaves no go.sum,
// so the next Build resolves again. The module needs only golang.org/x/mod,
// at the version this module requires (in the module cache already); the
// failing one imports a package no module provides.
func TestResolveOnceAndAgainAfterAFailure(t *testing.T) {
	tg := Target{Work: t.TempDir(), Logf: t.Logf}.withDefaults()
	out, err := goOutput(t.Context(), ".", "list", "-m", "-f", "{{.Version}}", "golang.org/x/mod")
	if err != nil {
		t.Fatal(err)
	}
	xmod := strings.TrimSpace(string(out))
	writes := 0
	module := func(imp string) func(context.Context, Target, string) error {
		return func(_ context.Context, _ Target, src string) error {
			writes++
			goMod := "module resolvetest\n\ngo 1.26\n\nrequire golang.org/x/mod " + xmod + "\n"
			main := "package main\n\nimport _ \"" + imp + "\"\n\nfunc main() {}\n"
			if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(goMod), 0o644); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(src, "main.go"), []byte(main), 0o644)
		}
	}
	src := t.TempDir()
	good := module("golang.org/x/mod/modfile")
	for range 2 {
		if err := resolve(t.Context(), tg, src, "resolvetest", "a few KB", good); err != nil {
			t.Fatal(err)
		}
	}
	if writes != 1 {
		t.Errorf("the module was written %d times over two resolves, want once (go.sum kept)", writes)
	}
	if _, err := os.Stat(filepath.Join(src, "go.sum")); err != nil {
		t.Errorf("no go.sum after a tidy that worked: %v", err)
	}

	bad := t.TempDir()
	err = resolve(t.Context(), tg, bad, "resolvetest", "a few KB", module("example.invalid/nothing"))
	if err == nil || !strings.Contains(err.Error(), "go mod tidy") {
		t.Fatalf("resolve of an unresolvable import = %v, want the tidy's error", err)
	}
	if _, err := os.Stat(filepath.Join(bad, "go.sum")); !os.IsNotExist(err) {
		t.Errorf("a go.sum after a failed tidy (%v): the next Build would not resolve again", err)
	}
}

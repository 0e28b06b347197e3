package kubebuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// The module buildTraefik writes requires Traefik at the configured
// version, carries every replace line of Traefik's own go.mod (without
// them its command does not build: they swap in forks) and names the
// command as a tool, so `go mod tidy` keeps what it needs. It reads
// Traefik's go.mod through the module proxy (the go.mod only, a few KB).
func TestTraefikModule(t *testing.T) {
	cfg := Target{Work: t.TempDir(), Logf: t.Logf}.withDefaults()
	src := t.TempDir()
	if err := writeTraefikModule(t.Context(), cfg, src); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(mod.Require) != 1 || mod.Require[0].Mod.Path != traefikModule || mod.Require[0].Mod.Version != cfg.TraefikVersion {
		t.Errorf("requires %v, want only %s %s", mod.Require, traefikModule, cfg.TraefikVersion)
	}
	if len(mod.Tool) != 1 || mod.Tool[0].Path != traefikModule+"/cmd/traefik" {
		t.Errorf("tools %v, want %s/cmd/traefik", mod.Tool, traefikModule)
	}
	replaced := map[string]string{}
	for _, r := range mod.Replace {
		replaced[r.Old.Path] = r.New.Path + "@" + r.New.Version
	}
	// v3.6.12 replaces three modules with containous forks.
	if got := replaced["github.com/gorilla/mux"]; got != "github.com/containous/mux@v0.0.0-20250523120546-41b6ec3aed59" {
		t.Errorf("github.com/gorilla/mux is replaced by %q, want Traefik's fork; every replace: %v", got, replaced)
	}
	if len(replaced) < 3 {
		t.Errorf("%d replace lines, want Traefik's three: %v", len(replaced), replaced)
	}
}

// A Traefik build that fails leaves its error in TraefikFailed, where the
// cluster suite, waiting for the binary while CI builds it, reads it. A
// version the module proxy does not have fails at once, in its first go
// command.
func TestTraefikFailureIsLeftForTheWaiter(t *testing.T) {
	tg := Target{Work: t.TempDir(), TraefikVersion: "v3.0.0-no-such-version", Logf: t.Logf}.withDefaults()
	err := Traefik(t.Context(), tg)
	if err == nil {
		t.Fatal("Traefik built a version that does not exist")
	}
	msg, rerr := os.ReadFile(tg.TraefikFailed())
	if rerr != nil || !strings.Contains(string(msg), "v3.0.0-no-such-version") {
		t.Fatalf("TraefikFailed holds %q (%v), want the build's error: %v", msg, rerr, err)
	}
}

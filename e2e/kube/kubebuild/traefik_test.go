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

// The suite's Traefik builds with a copy of lego whose DNS provider
// registry is legoStub: the copy keeps every other file, and a lego whose
// providers/dns package is shaped otherwise is neither copied nor trimmed.
func TestTrimLegoReplacesOnlyTheRegistry(t *testing.T) {
	write := func(root string, files map[string]string) {
		for name, body := range files {
			p := filepath.Join(root, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o444); err != nil { // read-only, as in the module cache
				t.Fatal(err)
			}
		}
	}
	lego := t.TempDir()
	write(lego, map[string]string{
		"go.mod":                               "module github.com/go-acme/lego/v4\n",
		"challenge/provider.go":                "package challenge\n",
		"providers/dns/" + legoRegistry:        "package dns\n// imports every provider\n",
		"providers/dns/dns_providers_test.go":  "package dns\n",
		"providers/dns/route53/route53.go":     "package route53\n",
		"providers/dns/internal/errutils/e.go": "package errutils\n",
	})
	dst := filepath.Join(t.TempDir(), "lego-v4.33.0")
	for range 2 { // a second trim replaces the first copy
		ok, why, err := trimLego(lego, dst)
		if err != nil || !ok {
			t.Fatalf("trimLego = %v, %q, %v; want a trimmed copy", ok, why, err)
		}
	}
	for name, want := range map[string]string{
		"go.mod":                           "module github.com/go-acme/lego/v4\n",
		"challenge/provider.go":            "package challenge\n",
		"providers/dns/" + legoRegistry:    legoStub,
		"providers/dns/route53/route53.go": "package route53\n",
	} {
		got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
		if err != nil || string(got) != want {
			t.Errorf("the copy's %s = %q, %v; want %q", name, got, err, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(lego, "providers", "dns", legoRegistry)); string(got) == legoStub {
		t.Error("trimLego changed the module it copied")
	}

	other := t.TempDir()
	write(other, map[string]string{"providers/dns/" + legoRegistry: "package dns\n", "providers/dns/extra.go": "package dns\n"})
	odst := filepath.Join(t.TempDir(), "lego")
	ok, why, err := trimLego(other, odst)
	if err != nil || ok || !strings.Contains(why, "extra.go") {
		t.Errorf("trimLego of a registry in two files = %v, %q, %v; want false and a reason naming the files", ok, why, err)
	}
	if _, err := os.Stat(odst); !os.IsNotExist(err) {
		t.Errorf("trimLego copied a module it did not trim: %v", err)
	}
}

package kubebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/modfile"
)

// traefikModule is Traefik's module: the ingress controller the suite runs
// in the cluster to route to a Service's endpoints, as users' ingresses do.
const traefikModule = "github.com/traefik/traefik/v3"

// TraefikBin is the Traefik binary Build makes of Target.TraefikVersion:
// static (CGO_ENABLED=0), for the cluster's image of it.
func (t Target) TraefikBin() string {
	t = t.withDefaults()
	return filepath.Join(t.Work, "bin-traefik-"+t.TraefikVersion, "traefik")
}

// TraefikFailed is the file in which a failed Traefik build leaves its
// error (one line); no such file while a build runs or after one worked.
func (t Target) TraefikFailed() string { return t.TraefikBin() + ".failed" }

// Traefik builds Traefik's command at Target.TraefikVersion into
// TraefikBin, unless it is there already. Traefik is not built with `go
// install …@version`: its go.mod replaces three modules with forks
// (containous/mux and others), and replace directives apply only in the
// main module. Traefik writes a module of its own under Target.Work
// that requires Traefik, copies its replace lines, and names its command
// with a tool directive (so `go mod tidy` keeps what it needs), then builds
// it with the version stamped as Traefik's release does. Cold, on 2 cores:
// about 4 minutes alone (measured 2026-12-07) and 200 MB of modules; its
// resolve is slow (5 to 10 minutes of go.mod fetches one after another).
//
// A build that fails writes its error to TraefikFailed, which a build that
// starts removes: a process waiting for TraefikBin (the cluster suite, while
// CI builds Traefik beside its first tests) stops waiting on either file.
func Traefik(ctx context.Context, t Target) (err error) {
	t = t.withDefaults()
	if _, err := niceness(); err != nil {
		return err
	}
	out := t.TraefikBin()
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	os.Remove(t.TraefikFailed())
	defer func() {
		if err != nil {
			os.WriteFile(t.TraefikFailed(), []byte(err.Error()+"\n"), 0o644)
		}
	}()
	src := filepath.Join(t.Work, "src-traefik-"+t.TraefikVersion)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	if err := resolve(ctx, t, src, traefikModule+"@"+t.TraefikVersion, "about 200 MB", writeTraefikModule); err != nil {
		return err
	}
	t.Logf("building traefik %s (about 4 min on 2 cores with a cold Go build cache)", t.TraefikVersion)
	start := time.Now()
	tmp := out + ".tmp"
	ld := "-s -w -X " + traefikModule + "/pkg/version.Version=" + t.TraefikVersion
	if err := goCmd(ctx, src, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags", ld, "-o", tmp, traefikModule+"/cmd/traefik"); err != nil {
		return fmt.Errorf("kube: building traefik %s: %w", t.TraefikVersion, err)
	}
	if err := os.Rename(tmp, out); err != nil { // moved in only once built, so a cut build is rebuilt
		return err
	}
	t.Logf("built traefik %s in %s", t.TraefikVersion, time.Since(start).Round(time.Second))
	return nil
}

// writeTraefikModule writes src/go.mod: a module that requires Traefik at
// Target.TraefikVersion with the same Go version and replace lines as
// Traefik's own go.mod, and its command as a tool.
func writeTraefikModule(ctx context.Context, t Target, src string) error {
	var dl struct{ GoMod, Error string }
	out, err := goOutput(ctx, src, "mod", "download", "-json", traefikModule+"@"+t.TraefikVersion)
	if jerr := json.Unmarshal(out, &dl); jerr != nil || dl.GoMod == "" {
		return fmt.Errorf("kube: go mod download %s@%s: %v %s %s", traefikModule, t.TraefikVersion, err, dl.Error, out)
	}
	data, err := os.ReadFile(dl.GoMod)
	if err != nil {
		return err
	}
	theirs, err := modfile.Parse(dl.GoMod, data, nil)
	if err != nil {
		return err
	}
	mod := &modfile.File{}
	mod.AddModuleStmt("traefikbuild")
	mod.AddGoStmt(theirs.Go.Version)
	mod.AddNewRequire(traefikModule, t.TraefikVersion, false)
	for _, r := range theirs.Replace {
		if modfile.IsDirectoryPath(r.New.Path) {
			return fmt.Errorf("kube: %s@%s replaces %s with the directory %s, which its module does not ship", traefikModule, t.TraefikVersion, r.Old.Path, r.New.Path)
		}
		if err := mod.AddReplace(r.Old.Path, r.Old.Version, r.New.Path, r.New.Version); err != nil {
			return err
		}
	}
	if err := mod.AddTool(traefikModule + "/cmd/traefik"); err != nil {
		return err
	}
	mod.Cleanup()
	text, err := mod.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(src, "go.mod"), text, 0o644)
}

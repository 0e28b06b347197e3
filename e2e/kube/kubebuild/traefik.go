package kubebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
// it with the version stamped as Traefik's release does, with lego's DNS
// providers left out (withoutDNSProviders). Cold, measured 2026-12-07 on 2
// cores: 14 CPU-minutes with them left out, 23 with them (each with its
// resolve), and 200 MB of modules; its resolve is slow on a cold module
// cache (5 to 10 minutes of go.mod fetches one after another).
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
	if err := withoutDNSProviders(ctx, t, src); err != nil {
		return err
	}
	t.Logf("building traefik %s (about 13 CPU-minutes with a cold Go build cache)", t.TraefikVersion)
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

// legoModule is the ACME client Traefik gets certificates with. Its
// package providers/dns registers about 180 DNS-01 challenge providers,
// each with its cloud's SDK: 847 of the 2,496 packages Traefik v3.6.12's
// command compiles are there for it alone.
const legoModule = "github.com/go-acme/lego/v4"

// legoRegistry is the one file of lego's providers/dns package (generated
// by lego's `make generate-dns`), where NewDNSChallengeProviderByName
// imports every provider.
const legoRegistry = "zz_gen_dns_providers.go"

// legoStub replaces legoRegistry in the copy of lego the suite's Traefik
// builds with: the same function, which refuses every name.
const legoStub = `// Package dns is lego's registry of DNS-01 challenge providers, replaced
// by lameduck's e2e/kube/kubebuild in the Traefik its cluster suite runs:
// the suite asks for no certificate, and the providers' SDKs were a third
// of Traefik's compile.
package dns

import (
	"fmt"

	"github.com/go-acme/lego/v4/challenge"
)

// NewDNSChallengeProviderByName returns an error naming the provider.
func NewDNSChallengeProviderByName(name string) (challenge.Provider, error) {
	return nil, fmt.Errorf("DNS challenge provider %q: this Traefik was built by lameduck's e2e/kube/kubebuild without lego's DNS providers", name)
}
`

// withoutDNSProviders builds Traefik with a copy of lego whose DNS-01
// provider registry refuses every name (legoStub): the cluster suite's
// Traefik routes plain HTTP and asks for no certificate, and the
// providers' SDKs (Azure, Huawei Cloud, Yandex Cloud, Google's APIs, …)
// cost about a third of its cold compile. Traefik's own code, and every
// other dependency, is built as released. The copy sits beside the build
// module (src/lego-<version>, from the module cache) and a replace line
// points lego at it; a module that already has one is left as it is. A
// Traefik version whose lego is not shaped as expected (no such module,
// or a providers/dns package with other files) is built untrimmed, and
// the log says why.
func withoutDNSProviders(ctx context.Context, t Target, src string) error {
	path := filepath.Join(src, "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	mod, err := modfile.Parse(path, data, nil)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(mod.Replace, func(r *modfile.Replace) bool { return r.Old.Path == legoModule }) {
		return nil // trimmed by an earlier build
	}
	i := slices.IndexFunc(mod.Require, func(r *modfile.Require) bool { return r.Mod.Path == legoModule })
	if i < 0 {
		t.Logf("traefik %s does not require %s: nothing to trim", t.TraefikVersion, legoModule)
		return nil
	}
	version := mod.Require[i].Mod.Version
	var dl struct{ Dir, Error string }
	out, err := goOutput(ctx, src, "mod", "download", "-json", legoModule+"@"+version)
	if jerr := json.Unmarshal(out, &dl); jerr != nil || dl.Dir == "" {
		return fmt.Errorf("kube: go mod download %s@%s: %v %s %s", legoModule, version, err, dl.Error, out)
	}
	copied := "lego-" + version
	ok, why, err := trimLego(dl.Dir, filepath.Join(src, copied))
	if err != nil {
		return fmt.Errorf("kube: copying %s@%s without its DNS providers: %w", legoModule, version, err)
	}
	if !ok {
		t.Logf("traefik %s is built with all of lego's DNS providers: %s", t.TraefikVersion, why)
		return nil
	}
	if err := mod.AddReplace(legoModule, "", "./"+copied, ""); err != nil {
		return err
	}
	mod.Cleanup()
	text, err := mod.Format()
	if err != nil {
		return err
	}
	t.Logf("traefik %s is built with %s@%s's DNS-01 providers left out (./%s)", t.TraefikVersion, legoModule, version, copied)
	return os.WriteFile(path, text, 0o644)
}

// trimLego copies the lego module in dir to dst (replacing any earlier
// copy) with its DNS provider registry replaced by legoStub. It reports
// false, and why, without copying, when dir's providers/dns package is not
// legoRegistry alone.
func trimLego(dir, dst string) (bool, string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "providers", "dns"))
	if err != nil {
		return false, fmt.Sprintf("no providers/dns package (%v)", err), nil
	}
	var files []string
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && filepath.Ext(name) == ".go" && !strings.HasSuffix(name, "_test.go") {
			files = append(files, name)
		}
	}
	if !slices.Equal(files, []string{legoRegistry}) {
		return false, fmt.Sprintf("its providers/dns package has the files %v, not %s alone", files, legoRegistry), nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return false, "", err
	}
	if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
		return false, "", err
	}
	return true, "", os.WriteFile(filepath.Join(dst, "providers", "dns", legoRegistry), []byte(legoStub), 0o644)
}

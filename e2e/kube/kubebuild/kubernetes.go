package kubebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// Components are the binaries Build makes, in the order cluster.Up starts
// them.
var Components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}

// Build makes the binaries of Target.Version into Target.Bin, and Traefik
// into Target.TraefikBin, unless every one of them is already there (then
// it returns at once). A cold build of Kubernetes on a
// 2-core machine takes 12 to 14 minutes (two cold CI runs, 2026-12) and
// grows the Go build cache by about 3.5 GB; with a warm cache it only
// links, in seconds. The two builds run at once: each starts by resolving
// its modules (hundreds of go.mod files fetched one after another, latency
// more than bandwidth), so one resolves while the other compiles, and the
// compilers share the cores. Build returns the first error of either, once
// both have ended.
//
// k8s.io/kubernetes cannot be built with `go install …@version`: its go.mod
// replaces its staging modules (k8s.io/api, k8s.io/client-go, …) with local
// directories. Build writes a module of its own under Target.Work that
// requires k8s.io/kubernetes and each staging module it both replaces and
// requires at the matching v0.X.Y (k8s.io/sample-* are replaced but not
// required, and the proxy does not serve them), plus etcd's server at the
// version Kubernetes pins, then builds the six commands and a three-line
// etcd main with CGO_ENABLED=0, stamping the version as Kubernetes' own
// build does (hack/lib/version.sh).
func Build(ctx context.Context, t Target) error {
	traefik := make(chan error, 1)
	go func() { traefik <- Traefik(ctx, t) }()
	kerr := Kubernetes(ctx, t)
	terr := <-traefik
	return errors.Join(kerr, terr)
}

// Kubernetes builds the Components missing from Target.Bin (Build's first
// half; see there).
func Kubernetes(ctx context.Context, t Target) error {
	t = t.withDefaults()
	if _, err := niceness(); err != nil {
		return err
	}
	missing := slices.DeleteFunc(slices.Clone(Components), func(b string) bool {
		_, err := os.Stat(t.bin(b))
		return err == nil
	})
	if len(missing) == 0 {
		return nil
	}
	src := filepath.Join(t.Work, "src-"+t.Version)
	if err := os.MkdirAll(filepath.Join(src, "cmd", "etcd"), 0o755); err != nil {
		return err
	}
	if err := resolve(ctx, t, src, "k8s.io/kubernetes@"+t.Version, "about 800 MB", writeBuildModule); err != nil {
		return err
	}
	minor := strings.Split(t.Version, ".")[1]
	ld := "-s -w"
	for _, p := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ld += fmt.Sprintf(" -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=1 -X %[1]s.gitMinor=%[3]s -X %[1]s.gitTreeState=clean -X %[1]s.buildDate=1970-01-01T00:00:00Z", p, t.Version, minor)
	}
	var pkgs []string
	for _, b := range missing {
		if b == "etcd" {
			pkgs = append(pkgs, "./cmd/etcd")
		} else {
			pkgs = append(pkgs, "k8s.io/kubernetes/cmd/"+b)
		}
	}
	tmp := t.Bin() + ".tmp"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	t.Logf("building %s (12 to 14 min on 2 cores with a cold Go build cache)", strings.Join(missing, " "))
	start := time.Now()
	args := append([]string{"build", "-ldflags", ld, "-o", tmp + "/"}, pkgs...)
	if err := goCmd(ctx, src, []string{"CGO_ENABLED=0"}, args...); err != nil {
		return fmt.Errorf("kube: building %s: %w", strings.Join(missing, " "), err)
	}
	if err := os.MkdirAll(t.Bin(), 0o755); err != nil {
		return err
	}
	for _, b := range missing { // moved in only once built, so a cut build is rebuilt
		if err := os.Rename(filepath.Join(tmp, b), t.bin(b)); err != nil {
			return err
		}
	}
	os.RemoveAll(tmp)
	t.Logf("built %s in %s", strings.Join(missing, " "), time.Since(start).Round(time.Second))
	return nil
}

// resolve writes the build module in src with write and resolves its
// modules with go mod tidy (size: how much a cold cache downloads), unless
// src holds a go.sum from an earlier resolve. A failed tidy leaves no
// go.sum, so the next Build resolves again.
func resolve(ctx context.Context, t Target, src, module, size string, write func(context.Context, Target, string) error) error {
	if _, err := os.Stat(filepath.Join(src, "go.sum")); err == nil {
		return nil
	}
	t.Logf("resolving %s", module)
	if err := write(ctx, t, src); err != nil {
		return err
	}
	t.Logf("go mod tidy for %s (%s of modules on a cold cache)", module, size)
	start := time.Now()
	// At normal priority whatever NiceEnv says: the resolve mostly waits on
	// the module proxy, one go.mod after another, and each short turn of
	// CPU it needs comes late at a nice level on a busy machine (a cold CI
	// run: Traefik's resolve took 20m14s at nice 10, 6m32s idle).
	if err := goCmdAt(ctx, "0", src, nil, "mod", "tidy"); err != nil {
		os.Remove(filepath.Join(src, "go.sum"))
		return fmt.Errorf("kube: go mod tidy in %s: %w", src, err)
	}
	t.Logf("resolved %s's modules in %s", module, time.Since(start).Round(time.Second))
	return nil
}

func writeBuildModule(ctx context.Context, t Target, src string) error {
	var dl struct{ GoMod, Error string }
	out, err := goOutput(ctx, src, "mod", "download", "-json", "k8s.io/kubernetes@"+t.Version)
	if jerr := json.Unmarshal(out, &dl); jerr != nil || dl.GoMod == "" {
		return fmt.Errorf("kube: go mod download k8s.io/kubernetes@%s: %v %s %s", t.Version, err, dl.Error, out)
	}
	data, err := os.ReadFile(dl.GoMod)
	if err != nil {
		return err
	}
	k8s, err := modfile.Parse(dl.GoMod, data, nil)
	if err != nil {
		return err
	}
	required := map[string]string{}
	for _, r := range k8s.Require {
		required[r.Mod.Path] = r.Mod.Version
	}
	staging := "v0." + strings.TrimPrefix(t.Version, "v1.") // v1.34.4 -> v0.34.4
	mod := &modfile.File{}
	mod.AddModuleStmt("kubebuild")
	goVersion := k8s.Go.Version
	mod.AddGoStmt(goVersion)
	mod.AddNewRequire("k8s.io/kubernetes", t.Version, false)
	etcd := required["go.etcd.io/etcd/server/v3"]
	if etcd == "" {
		return fmt.Errorf("kube: k8s.io/kubernetes@%s does not require go.etcd.io/etcd/server/v3", t.Version)
	}
	mod.AddNewRequire("go.etcd.io/etcd/server/v3", etcd, false)
	for _, r := range k8s.Replace {
		if !strings.HasPrefix(r.New.Path, "./staging/") {
			continue
		}
		if _, ok := required[r.Old.Path]; !ok {
			continue // replaced but not required: k8s.io/sample-*, which the proxy does not serve
		}
		mod.AddNewRequire(r.Old.Path, staging, false)
		if err := mod.AddReplace(r.Old.Path, "", r.Old.Path, staging); err != nil {
			return err
		}
	}
	// Kubernetes' own go.mod pins GODEBUG defaults to its Go version.
	if parts := strings.Split(goVersion, "."); len(parts) >= 2 {
		mod.AddGodebug("default", "go"+parts[0]+"."+parts[1])
	}
	mod.Cleanup()
	text, err := mod.Format()
	if err != nil {
		return err
	}
	files := map[string]string{
		"go.mod": string(text),
		"cmd/etcd/main.go": "package main\n\nimport (\n\t\"os\"\n\n\t\"go.etcd.io/etcd/server/v3/etcdmain\"\n)\n\n" +
			"func main() { etcdmain.Main(os.Args) }\n",
		"tools.go": "//go:build tools\n\npackage tools\n\nimport (\n" +
			"\t_ \"k8s.io/kubernetes/cmd/kube-apiserver\"\n\t_ \"k8s.io/kubernetes/cmd/kube-controller-manager\"\n" +
			"\t_ \"k8s.io/kubernetes/cmd/kube-proxy\"\n\t_ \"k8s.io/kubernetes/cmd/kube-scheduler\"\n" +
			"\t_ \"k8s.io/kubernetes/cmd/kubectl\"\n\t_ \"k8s.io/kubernetes/cmd/kubelet\"\n)\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// goEnv is the environment of the go commands Build runs: outside the
// repository's go.work.
func goEnv(extra []string) []string {
	return append(os.Environ(), append([]string{"GOWORK=off"}, extra...)...)
}

// NiceEnv names the variable that sets the nice(1) increment of the
// compiles Build runs, 0 to 19 (the resolve of modules runs at normal
// priority: it mostly waits on the network). Default 19, the lowest CPU
// priority, so a build does not starve whatever else the machine runs; CI
// sets 0 for Kubernetes, since the cluster, and so the suite, waits for
// it, and starts Traefik's at 19, raising it once Kubernetes is built
// (.ci/run).
const NiceEnv = "LDTEST_KUBE_BUILD_NICE"

// niceness returns $LDTEST_KUBE_BUILD_NICE, or 19 when it is empty; an
// error names a value that is not an integer from 0 to 19.
func niceness() (string, error) {
	v := os.Getenv(NiceEnv)
	if v == "" {
		return "19", nil
	}
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 19 {
		return "", fmt.Errorf("kube: %s=%q: want an integer from 0 (normal priority) to 19 (the lowest, the default)", NiceEnv, v)
	}
	return v, nil
}

// goCmd runs go with args in dir at the nice level NiceEnv sets, its
// output on stderr.
func goCmd(ctx context.Context, dir string, env []string, args ...string) error {
	nice, err := niceness()
	if err != nil {
		return err
	}
	return goCmdAt(ctx, nice, dir, env, args...)
}

// goCmdAt runs go with args in dir at nice level nice, its output on
// stderr.
func goCmdAt(ctx context.Context, nice, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", nice, "go"}, args...)...)
	cmd.Dir, cmd.Env = dir, goEnv(env)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func goOutput(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, goEnv(nil)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return out, nil
}

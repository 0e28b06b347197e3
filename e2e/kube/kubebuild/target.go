// Package kubebuild builds the binaries of the cluster the suite in e2e/kube
// runs on: Kubernetes' components and etcd from k8s.io/kubernetes's module,
// and Traefik from its module, each outside the repository's go.work. It
// imports no Kubernetes client, so its command (e2e/kube/cmd/kubebuild)
// compiles in seconds and the build starts at once; package cluster runs
// what it builds.
package kubebuild

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
)

// Target names what is built and where. The zero value is usable: every
// field has a default, given on the field; package cluster's Config carries
// the same fields and passes them on.
type Target struct {
	// Work is the directory the sources and binaries go in (kept between
	// runs, so a second Build builds nothing). Default: $LDTEST_KUBE_WORK,
	// else /var/tmp/lameduck-kube.
	Work string
	// Version is the k8s.io/kubernetes module version built. Default:
	// $LDTEST_KUBE_VERSION, else v1.34.4 (v1.35.4 and v1.37.2 work too).
	Version string
	// TraefikVersion is the github.com/traefik/traefik/v3 module version
	// built for the suite's ingress. Default v3.6.12 (v3.7 adds a nested
	// module the module proxy does not serve).
	TraefikVersion string
	// Logf receives progress lines. Default: stderr, each line prefixed
	// "kube: " (no timestamp).
	Logf func(format string, args ...any)
}

// WithDefaults returns t with every empty field set to its default.
func (t Target) WithDefaults() Target { return t.withDefaults() }

func (t Target) withDefaults() Target {
	t.Work = cmp.Or(t.Work, os.Getenv("LDTEST_KUBE_WORK"), "/var/tmp/lameduck-kube")
	t.Version = cmp.Or(t.Version, os.Getenv("LDTEST_KUBE_VERSION"), "v1.34.4")
	t.TraefikVersion = cmp.Or(t.TraefikVersion, "v3.6.12")
	if t.Logf == nil {
		t.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "kube: "+format+"\n", args...) }
	}
	return t
}

// Bin is the directory of the built Kubernetes binaries of this Version,
// one file per entry of Components.
func (t Target) Bin() string { t = t.withDefaults(); return filepath.Join(t.Work, "bin-"+t.Version) }

func (t Target) bin(name string) string { return filepath.Join(t.Bin(), name) }

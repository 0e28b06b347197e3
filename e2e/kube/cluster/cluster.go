// Package cluster brings up a real one-node Kubernetes on this machine for
// lameduck's end-to-end tests, and takes it down again leaving the host as
// it found it.
//
// The cluster is made of the real components, built from the Go module
// proxy (etcd and k8s.io/kubernetes' kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet, kube-proxy and kubectl) and Debian's packages
// (containerd, runc, the CNI plugins, iptables, conntrack): the kubelet runs
// the probes, the EndpointSlice controller marks a terminating pod not
// ready, kube-proxy programs iptables, and the kubelet SIGKILLs a container
// at terminationGracePeriodSeconds. There is no Docker and no registry: the
// images are built here as OCI archives and imported into containerd.
//
// Everything stays on the machine: the node IP and the Service range live
// on a bridge with no ports, pods get no default route and no masquerade,
// and a FORWARD rule drops anything a pod sends that is not for a pod.
// docs/kubernetes.md in the repository lists every change Up makes to the
// host and how Down undoes it.
//
// Up and Down need root (CAP_NET_ADMIN and CAP_SYS_ADMIN). They are not safe
// to call concurrently; the state of a running cluster lives in
// Config.Work/run, so Down works from another process than Up.
package cluster

import (
	"cmp"
	"context"
	"path/filepath"

	"github.com/lameduck/lameduck/e2e/kube/kubebuild"
)

// Config names where the cluster lives and what it is built from. The zero
// value is usable: every field has a default, given on the field.
type Config struct {
	// Work is the directory for the built binaries (kept between runs, so a
	// second Up builds nothing), the images and the running cluster's
	// state. Default: $LDTEST_KUBE_WORK, else /var/tmp/lameduck-kube.
	Work string
	// Version is the k8s.io/kubernetes module version built. Default
	// v1.34.4 (v1.35.4 and v1.37.2 work too).
	Version string
	// TraefikVersion is the github.com/traefik/traefik/v3 module version
	// Build makes for the suite's ingress. Default v3.6.12 (v3.7 adds a
	// nested module the module proxy does not serve).
	TraefikVersion string
	// SkipTraefik keeps Up from building Traefik when it is missing: CI
	// builds it in the background beside the first tests, and the suite
	// waits for it ($LDTEST_KUBE_TRAEFIK_WAIT). The cluster runs without it.
	SkipTraefik bool
	// NodeName is the Node's name. Default "lameduck-e2e".
	NodeName string
	// Logf receives progress lines. Default: stderr, each line prefixed
	// "kube: " (no timestamp). Work, Version, TraefikVersion and Logf are
	// kubebuild.Target's, with its defaults.
	Logf func(format string, args ...any)
}

// The cluster's fixed addresses: private ranges that never leave the
// machine (see the package doc).
const (
	NodeIP       = "10.245.0.1"    // on the kube-node bridge; the apiserver listens here
	PodCIDR      = "10.244.0.0/24" // the cni0 bridge
	PodGateway   = "10.244.0.1"
	ServiceCIDR  = "10.96.0.0/24"
	APIServiceIP = "10.96.0.1"
	nodeBridge   = "kube-node"
	podBridge    = "cni0"
	guardComment = "lameduck-e2e-no-egress"
)

func (c Config) withDefaults() Config {
	t := c.target()
	c.Work, c.Version, c.TraefikVersion, c.Logf = t.Work, t.Version, t.TraefikVersion, t.Logf
	c.NodeName = cmp.Or(c.NodeName, "lameduck-e2e")
	return c
}

// target is what kubebuild builds for this Config, with its defaults.
func (c Config) target() kubebuild.Target {
	return kubebuild.Target{Work: c.Work, Version: c.Version, TraefikVersion: c.TraefikVersion, Logf: c.Logf}.WithDefaults()
}

// Bin is the directory of the built binaries of this Version.
func (c Config) Bin() string { return c.target().Bin() }

// TraefikBin is the Traefik binary Build makes of TraefikVersion: static
// (CGO_ENABLED=0), for the cluster's image of it.
func (c Config) TraefikBin() string { return c.target().TraefikBin() }

// TraefikFailed is the file a failed Traefik build leaves its error in
// (kubebuild.Target.TraefikFailed).
func (c Config) TraefikFailed() string { return c.target().TraefikFailed() }

// Build makes the binaries of Version into Bin, and Traefik into
// TraefikBin, unless every one of them is already there (kubebuild.Build
// says how and how long it takes).
func Build(ctx context.Context, cfg Config) error { return kubebuild.Build(ctx, cfg.target()) }

// Run is the directory of the running cluster's state: pids, logs,
// certificates, etcd's data, containerd's root.
func (c Config) Run() string { return filepath.Join(c.withDefaults().Work, "run") }

// Kubeconfig is the path of the admin kubeconfig Up writes (cluster-admin,
// through the system:masters group).
func (c Config) Kubeconfig() string { return filepath.Join(c.Run(), "admin.kubeconfig") }

// Logs is the directory of the components' logs, one file per component.
func (c Config) Logs() string { return filepath.Join(c.Run(), "logs") }

func (c Config) pki() string              { return filepath.Join(c.Run(), "pki") }
func (c Config) pids() string             { return filepath.Join(c.Run(), "pids") }
func (c Config) containerdDir() string    { return filepath.Join(c.Run(), "containerd") }
func (c Config) ContainerdSocket() string { return filepath.Join(c.containerdDir(), "containerd.sock") }

func (c Config) bin(name string) string { return filepath.Join(c.Bin(), name) }

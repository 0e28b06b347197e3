package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lameduck/lameduck/e2e/kube/kubebuild"
)

// The sysctls the kubelet rewrites at start (its setupKernelTunables), put
// back as soon as it is healthy, and net.ipv4.ip_forward, which the CNI
// bridge plugin turns on and Down turns back.
var kubeletSysctls = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// Up brings the cluster up, step by step, each bounded and timed in the
// log: the Debian packages, the binaries (Build), the node network, the
// certificates, etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, containerd with the CNI bridge and the pause image, the
// kubelet until the Node is Ready, kube-proxy, and the default namespace's
// ServiceAccount. root is the repository's root (for the pause image's
// source). A component already running is kept. On an error the cluster is
// left as it is for its logs to be read: call Down.
func Up(ctx context.Context, cfg Config, root string) error {
	cfg = cfg.withDefaults()
	if os.Geteuid() != 0 {
		return fmt.Errorf("kube: the cluster needs root (network devices, iptables, mounts, cgroups); run as root")
	}
	t0 := time.Now()
	step := func(what string, f func() error) error {
		s := time.Now()
		if err := f(); err != nil {
			return err
		}
		cfg.Logf("%-34s %6.1fs (at %.1fs)", what, time.Since(s).Seconds(), time.Since(t0).Seconds())
		return nil
	}
	for _, d := range []string{cfg.Logs(), cfg.pids(), cfg.pki()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	steps := []struct {
		what string
		f    func() error
	}{
		{"Debian packages", func() error { return ensurePackages(ctx, cfg) }},
		{"Kubernetes binaries", func() error {
			if cfg.SkipTraefik {
				return kubebuild.Kubernetes(ctx, cfg.target())
			}
			return Build(ctx, cfg)
		}},
		{"node network (kube-node bridge)", func() error { return cfg.setUpNodeNetwork(ctx) }},
		{"certificates and kubeconfigs", func() error { return writePKI(cfg) }},
		{"etcd", func() error { return cfg.startEtcd(ctx) }},
		{"kube-apiserver", func() error { return cfg.startAPIServer(ctx) }},
		{"controller-manager and scheduler", func() error { return cfg.startControllers(ctx) }},
		{"containerd and CNI", func() error { return cfg.startContainerd(ctx) }},
		{"pause image", func() error { return LoadImages(ctx, cfg, root, PauseImage) }},
		{"kubelet and Node Ready", func() error { return cfg.startKubelet(ctx) }},
		{"kube-proxy", func() error { return cfg.startKubeProxy(ctx) }},
		{"default ServiceAccount", func() error { return cfg.waitServiceAccount(ctx) }},
	}
	for _, s := range steps {
		if err := step(s.what, s.f); err != nil {
			return err
		}
	}
	cfg.Logf("cluster up in %.1fs; KUBECONFIG=%s", time.Since(t0).Seconds(), cfg.Kubeconfig())
	return nil
}

// Client is a clientset for the running cluster, as its admin.
func (cfg Config) Client() (*kubernetes.Clientset, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig())
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 50, 100
	return kubernetes.NewForConfig(rc)
}

func httpOK(ctx context.Context, url string) error {
	_, err := httpBody(ctx, url)
	return err
}

// httpBody GETs url (at most 2s) and returns its body on 200, or an error
// that names the url and the status.
func httpBody(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// the components' own self-signed serving certificates; /healthz only
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

func (cfg Config) startEtcd(ctx context.Context) error {
	err := cfg.start("etcd", 0, cfg.bin("etcd"), "--name", "lameduck-e2e", "--data-dir", filepath.Join(cfg.Run(), "etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "lameduck-e2e=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	return cfg.waitFor(ctx, "etcd", 30*time.Second, func(ctx context.Context) error { return httpOK(ctx, "http://127.0.0.1:2379/health") })
}

func (cfg Config) startAPIServer(ctx context.Context) error {
	pki := cfg.pki()
	err := cfg.start("kube-apiserver", 0, cfg.bin("kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", NodeIP, "--advertise-address", NodeIP, "--secure-port", "6443",
		"--service-cluster-ip-range", ServiceCIDR,
		"--client-ca-file", filepath.Join(pki, "ca.crt"),
		"--tls-cert-file", filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file", filepath.Join(pki, "apiserver.key"),
		"--kubelet-client-certificate", filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key", filepath.Join(pki, "apiserver-kubelet-client.key"),
		// the node's name does not resolve (no DNS for it): reach the kubelet
		// (logs, exec) at the node IP, which its serving certificate names
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true", "--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	cs, err := cfg.Client()
	if err != nil {
		return err
	}
	return cfg.waitFor(ctx, "kube-apiserver", 90*time.Second, func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

func (cfg Config) startControllers(ctx context.Context) error {
	kc := func(n string) string { return filepath.Join(cfg.Run(), n+".kubeconfig") }
	err := cfg.start("kube-controller-manager", 0, cfg.bin("kube-controller-manager"),
		"--kubeconfig", kc("controller-manager"), "--authentication-kubeconfig", kc("controller-manager"),
		"--authorization-kubeconfig", kc("controller-manager"),
		"--bind-address", "127.0.0.1", "--leader-elect=false",
		"--service-account-private-key-file", filepath.Join(cfg.pki(), "sa.key"),
		"--root-ca-file", filepath.Join(cfg.pki(), "ca.crt"),
		"--use-service-account-credentials=true", "--allocate-node-cidrs=false",
		"--service-cluster-ip-range", ServiceCIDR, "--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	err = cfg.start("kube-scheduler", 0, cfg.bin("kube-scheduler"),
		"--kubeconfig", kc("scheduler"), "--authentication-kubeconfig", kc("scheduler"),
		"--authorization-kubeconfig", kc("scheduler"),
		"--bind-address", "127.0.0.1", "--leader-elect=false", "--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	if err := cfg.waitFor(ctx, "kube-controller-manager", 60*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, "https://127.0.0.1:10257/healthz")
	}); err != nil {
		return err
	}
	return cfg.waitFor(ctx, "kube-scheduler", 60*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, "https://127.0.0.1:10259/healthz")
	})
}

func (cfg Config) startContainerd(ctx context.Context) error {
	cd := cfg.containerdDir()
	cni := filepath.Join(cfg.Run(), "cni")
	for _, d := range []string{cd, filepath.Join(cni, "net.d"), filepath.Join(cni, "ipam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  enable_selinux = false
  disable_apparmor = true
  # Where root lacks CAP_SYS_RESOURCE, runc cannot set a sandbox's oom_score_adj of -998 ("can't get final
  # child's PID from pipe: EOF"); clamp every adjustment to containerd's own instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), cfg.ContainerdSocket(), filepath.Join(cd, "opt"),
		PauseImage.Name, filepath.Join(cni, "net.d"))
	if err := writeIfChanged(filepath.Join(cd, "config.toml"), []byte(config)); err != nil {
		return err
	}
	// One bridge, host-local addresses, no default route in pods and no
	// masquerade: a pod can answer the host and other pods and reach Service
	// IPs, and has no way out of the machine.
	conflist := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "lameduck-e2e",
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": %q,
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": %q}, {"dst": "%s/32"}]
    }
  }]
}
`, podBridge, filepath.Join(cni, "ipam"), PodCIDR, PodGateway, ServiceCIDR, NodeIP)
	if err := writeIfChanged(filepath.Join(cni, "net.d", "10-lameduck-e2e.conflist"), []byte(conflist)); err != nil {
		return err
	}
	if err := cfg.rememberSysctls("net.ipv4.ip_forward"); err != nil {
		return err
	}
	if err := cfg.addGuardRule(ctx); err != nil {
		return err
	}
	// Nice 0: the pods inherit containerd's priority, and the servers under
	// test must not be starved by the machine's other work.
	if err := cfg.start("containerd", 0, "/usr/bin/containerd", "--config", filepath.Join(cd, "config.toml")); err != nil {
		return err
	}
	return cfg.waitFor(ctx, "containerd", 30*time.Second, func(ctx context.Context) error {
		return run(ctx, "ctr", "--address", cfg.ContainerdSocket(), "version")
	})
}

func (cfg Config) startKubelet(ctx context.Context) error {
	dir := filepath.Join(cfg.Run(), "kubelet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pki := cfg.pki()
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
tlsCertFile: %s
tlsPrivateKeyFile: %s
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
failSwapOn: false
failCgroupV1: false
resolvConf: /etc/resolv.conf
maxPods: 50
serializeImagePulls: false
protectKernelDefaults: false
evictionHard: {memory.available: 200Mi, nodefs.available: 2%%, imagefs.available: 2%%}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
`, NodeIP, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "kubelet-server.crt"), filepath.Join(pki, "kubelet-server.key"),
		cfg.ContainerdSocket())
	if err := writeIfChanged(filepath.Join(dir, "config.yaml"), []byte(config)); err != nil {
		return err
	}
	if err := cfg.rememberSysctls(kubeletSysctls...); err != nil {
		return err
	}
	args := []string{"--config", filepath.Join(dir, "config.yaml"), "--kubeconfig", filepath.Join(cfg.Run(), "kubelet.kubeconfig"),
		"--root-dir", filepath.Join(dir, "root"), "--cert-dir", filepath.Join(dir, "pki"),
		"--hostname-override", cfg.NodeName, "--node-ip", NodeIP, "--v=1"}
	// cadvisor's containerd client looks at the default socket unless told;
	// the flag is deprecated and gone in v1.37, so only where it exists.
	if help, _ := exec.CommandContext(ctx, cfg.bin("kubelet"), "--help").CombinedOutput(); strings.Contains(string(help), "  --containerd ") {
		args = append(args, "--containerd", cfg.ContainerdSocket())
	}
	if err := cfg.start("kubelet", 0, cfg.bin("kubelet"), args...); err != nil {
		return err
	}
	if err := cfg.waitFor(ctx, "kubelet", 90*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, "http://127.0.0.1:10248/healthz")
	}); err != nil {
		return err
	}
	// The kubelet has done its one-time kernel setup: the machine's own values back.
	if err := cfg.restoreSysctls(false, kubeletSysctls...); err != nil {
		return err
	}
	cs, err := cfg.Client()
	if err != nil {
		return err
	}
	return cfg.waitFor(ctx, "kubelet", 90*time.Second, func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", cfg.NodeName)
	})
}

// Modes of kube-proxy the cluster runs in: Up starts ProxyIPTables;
// SetProxyMode switches.
const (
	ProxyIPTables = "iptables"
	// ProxyNFTables is kube-proxy's nftables mode (GA in Kubernetes 1.33),
	// which programs the kernel through Debian's nft.
	ProxyNFTables = "nftables"
)

// SetProxyMode restarts kube-proxy in mode (ProxyIPTables or
// ProxyNFTables) and waits, at most 60s, until it answers its healthz and
// reports that mode on its /proxyMode endpoint. Starting in one mode,
// kube-proxy removes the rules the other left. The error names the mode
// and carries the end of kube-proxy's log, where a kernel that refuses
// the mode says so.
func (cfg Config) SetProxyMode(ctx context.Context, mode string) error {
	if mode != ProxyIPTables && mode != ProxyNFTables {
		return fmt.Errorf("kube: proxy mode %q: use %q or %q", mode, ProxyIPTables, ProxyNFTables)
	}
	cfg = cfg.withDefaults()
	cfg.stop("kube-proxy")
	if err := cfg.startKubeProxyIn(ctx, mode); err != nil {
		return fmt.Errorf("kube: kube-proxy in %s mode: %w", mode, err)
	}
	return cfg.waitFor(ctx, "kube-proxy", 60*time.Second, func(ctx context.Context) error {
		got, err := httpBody(ctx, "http://127.0.0.1:10249/proxyMode")
		if err == nil && got != mode {
			err = fmt.Errorf("kube-proxy reports mode %q, want %q", got, mode)
		}
		return err
	})
}

func (cfg Config) startKubeProxy(ctx context.Context) error {
	return cfg.startKubeProxyIn(ctx, ProxyIPTables)
}

func (cfg Config) startKubeProxyIn(ctx context.Context, mode string) error {
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: `+mode+`
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["%s/32"]
iptables: {localhostNodePorts: false, masqueradeAll: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, filepath.Join(cfg.Run(), "kube-proxy.kubeconfig"), PodCIDR, cfg.NodeName, NodeIP, NodeIP)
	path := filepath.Join(cfg.Run(), "kube-proxy.yaml")
	if old, err := os.ReadFile(path); err == nil && string(old) != config {
		// Another mode (a test's SetProxyMode that never switched back):
		// kube-proxy exits when its file changes, so stop it first and
		// start it on the new one.
		cfg.stop("kube-proxy")
	}
	if err := writeIfChanged(path, []byte(config)); err != nil {
		return err
	}
	if err := cfg.start("kube-proxy", 0, cfg.bin("kube-proxy"), "--config", path, "--v=1"); err != nil {
		return err
	}
	return cfg.waitFor(ctx, "kube-proxy", 60*time.Second, func(ctx context.Context) error {
		return httpOK(ctx, "http://127.0.0.1:10256/healthz")
	})
}

func (cfg Config) waitServiceAccount(ctx context.Context) error {
	cs, err := cfg.Client()
	if err != nil {
		return err
	}
	return cfg.waitFor(ctx, "kube-controller-manager", 60*time.Second, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// Running reports whether every component of the cluster runs (by the
// pids Up recorded).
func (cfg Config) Running() bool { return len(cfg.NotRunning()) == 0 }

// NotRunning lists the components that do not run, in the order Up starts
// them.
func (cfg Config) NotRunning() []string {
	var out []string
	for _, c := range append([]string{"containerd"}, kubebuild.Components...) {
		if c != "kubectl" && !cfg.running(c) {
			out = append(out, c)
		}
	}
	return out
}

// writeIfChanged writes a component's configuration file only when its
// content differs: kube-proxy exits when its configuration file is
// written, even with the same content, so a second Up must not touch it.
func writeIfChanged(path string, data []byte, mode ...os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	perm := os.FileMode(0o644)
	if len(mode) > 0 {
		perm = mode[0]
	}
	return os.WriteFile(path, data, perm)
}

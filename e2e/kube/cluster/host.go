package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Debian packages the cluster needs, with a file each installs.
var packages = []struct{ pkg, file string }{
	{"containerd", "/usr/bin/containerd"},
	{"runc", "/usr/sbin/runc"},
	{"containernetworking-plugins", "/usr/lib/cni/bridge"},
	{"iptables", "/usr/sbin/iptables"},
	// nft: kube-proxy's nftables mode (SetProxyMode) programs through it.
	{"nftables", "/usr/sbin/nft"},
	{"conntrack", "/usr/sbin/conntrack"},
	{"iproute2", "/usr/sbin/ip"},
	// Debian's nginx: the suite's service-upstream proxy, a client of
	// the Service that no one here wrote (e2e/kube's nginx_test.go).
	{"nginx-light", "/usr/sbin/nginx"},
	// socat forwards the node's address to the host's PostgreSQL, which
	// listens on loopback only, for the pods' audit rows (audit_test.go).
	{"socat", "/usr/bin/socat"},
}

// ensurePackages installs the Debian packages that are missing (about 25s),
// trying `apt-get update` only when the install without it fails.
func ensurePackages(ctx context.Context, cfg Config) error {
	var missing []string
	for _, p := range packages {
		if _, err := os.Stat(p.file); err != nil {
			missing = append(missing, p.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	cfg.Logf("installing Debian packages: %s", strings.Join(missing, " "))
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "--no-install-recommends"}, missing...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get install %s: %w: %s", strings.Join(missing, " "), err, out)
		}
		return nil
	}
	if install() == nil {
		return nil
	}
	if err := run(ctx, "apt-get", "update"); err != nil {
		return fmt.Errorf("kube: %w", err)
	}
	if err := install(); err != nil {
		return fmt.Errorf("kube: %w", err)
	}
	return nil
}

// hostState is what Up changed on the host and Down must put back, kept in
// run/host.json so that Down works from another process.
type hostState struct {
	NodeBridge bool              `json:"nodeBridge"` // we made kube-node
	GuardRule  bool              `json:"guardRule"`  // we added the FORWARD guard
	Sysctls    map[string]string `json:"sysctls"`    // name -> value before Up
}

func (cfg Config) hostFile() string { return filepath.Join(cfg.Run(), "host.json") }

func (cfg Config) loadHost() hostState {
	var h hostState
	if b, err := os.ReadFile(cfg.hostFile()); err == nil {
		json.Unmarshal(b, &h)
	}
	if h.Sysctls == nil {
		h.Sysctls = map[string]string{}
	}
	return h
}

func (cfg Config) saveHost(h hostState) error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(cfg.hostFile(), b, 0o644)
}

// sysctlPath is the /proc/sys file of a sysctl name.
func sysctlPath(name string) string { return "/proc/sys/" + strings.ReplaceAll(name, ".", "/") }

func readSysctl(name string) (string, error) {
	b, err := os.ReadFile(sysctlPath(name))
	return strings.TrimSpace(string(b)), err
}

func writeSysctl(name, value string) error {
	return os.WriteFile(sysctlPath(name), []byte(value), 0o644)
}

// rememberSysctls records the values of names before anything changes them
// (only the first time: a second Up must not record the kubelet's values).
func (cfg Config) rememberSysctls(names ...string) error {
	h := cfg.loadHost()
	for _, n := range names {
		if _, ok := h.Sysctls[n]; ok {
			continue
		}
		v, err := readSysctl(n)
		if err != nil {
			return err
		}
		h.Sysctls[n] = v
	}
	return cfg.saveHost(h)
}

// restoreSysctls puts back the recorded values of names (every recorded one
// when names is empty) and forgets them when forget is set.
func (cfg Config) restoreSysctls(forget bool, names ...string) error {
	h := cfg.loadHost()
	var errs []error
	for n, v := range h.Sysctls {
		if len(names) > 0 && !contains(names, n) {
			continue
		}
		if cur, _ := readSysctl(n); cur != v {
			if err := writeSysctl(n, v); err != nil {
				errs = append(errs, fmt.Errorf("sysctl %s=%s: %w", n, v, err))
				continue
			}
		}
		if forget {
			delete(h.Sysctls, n)
		}
	}
	errs = append(errs, cfg.saveHost(h))
	return errors.Join(errs...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// setUpNodeNetwork makes the kube-node bridge: a bridge with no ports (the
// kernel may lack CONFIG_DUMMY) that holds the node IP and swallows the
// Service range, so a packet for a Service IP that kube-proxy did not DNAT
// is dropped there instead of taking the default route out of the machine.
func (cfg Config) setUpNodeNetwork(ctx context.Context) error {
	if linkExists(nodeBridge) {
		return nil
	}
	h := cfg.loadHost()
	h.NodeBridge = true
	if err := cfg.saveHost(h); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "add", nodeBridge, "type", "bridge"},
		{"addr", "add", NodeIP + "/32", "dev", nodeBridge},
		{"link", "set", nodeBridge, "up"},
		{"route", "add", ServiceCIDR, "dev", nodeBridge},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("kube: %w", err)
		}
	}
	return nil
}

var guardRule = []string{"FORWARD", "-s", PodCIDR, "!", "-d", PodCIDR, "-j", "DROP", "-m", "comment", "--comment", guardComment}

// addGuardRule drops, first in FORWARD, anything from a pod that is not
// going to a pod: pods have no way out of the machine.
func (cfg Config) addGuardRule(ctx context.Context) error {
	if run(ctx, "iptables", append([]string{"-C"}, guardRule...)...) == nil {
		return nil
	}
	h := cfg.loadHost()
	h.GuardRule = true
	if err := cfg.saveHost(h); err != nil {
		return err
	}
	if err := run(ctx, "iptables", append([]string{"-I", guardRule[0], "1"}, guardRule[1:]...)...); err != nil {
		return fmt.Errorf("kube: %w", err)
	}
	return nil
}

package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Down stops the cluster and undoes every change Up made to the host, in
// this order:
//
//  1. the namespaces the tests made are deleted while the kubelet can still
//     stop their pods gracefully (bounded at 40s);
//  2. kube-proxy and the kubelet stop (SIGTERM by recorded pid, SIGKILL
//     after 15s); containerd's remaining tasks are killed and removed,
//     then containerd stops, then any shim whose command line names this
//     cluster's containerd socket (and no other);
//  3. the control plane stops: scheduler, controller-manager, apiserver,
//     etcd;
//  4. mounts under Config.Run are unmounted, the pods' network namespaces
//     (cni-*), cni0 and kube-node are deleted (the Service route goes with
//     kube-node), kube-proxy's KUBE-* and CNI's CNI-* iptables chains and
//     the FORWARD guard are removed, processes left in the kubepods cgroups
//     are killed and those cgroups removed, and each sysctl Up recorded is
//     set back to its value before Up.
//
// Down keeps the binaries and, unless purge is set, Config.Run (logs and
// certificates) for reading. It goes on past a failed step and returns
// every error joined; calling it on a machine with no cluster does nothing.
func Down(ctx context.Context, cfg Config, purge bool) error {
	cfg = cfg.withDefaults()
	var errs []error
	if cfg.running("kubelet") && cfg.running("kube-apiserver") {
		if err := cfg.deleteTestNamespaces(ctx); err != nil {
			cfg.Logf("deleting the tests' namespaces: %v (going on)", err)
		}
	}
	cfg.stop("kube-proxy")
	cfg.stop("kubelet")
	sock := cfg.ContainerdSocket()
	if cfg.running("containerd") {
		ctr := func(args ...string) []string {
			out, _ := output(ctx, "ctr", append([]string{"--address", sock, "-n", "k8s.io"}, args...)...)
			return strings.Fields(out)
		}
		for _, id := range ctr("tasks", "ls", "-q") {
			ctr("tasks", "kill", "-s", "KILL", id)
		}
		time.Sleep(time.Second)
		for _, id := range ctr("tasks", "ls", "-q") {
			ctr("tasks", "rm", "-f", id)
		}
		for _, id := range ctr("containers", "ls", "-q") {
			ctr("containers", "rm", id)
		}
	}
	cfg.stop("containerd")
	cfg.killOurShims(sock)
	for _, c := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		cfg.stop(c)
	}
	errs = append(errs, cfg.undoHost(ctx)...)
	if purge {
		if err := os.RemoveAll(cfg.Run()); err != nil {
			errs = append(errs, err)
		}
	}
	cfg.Logf("down")
	return errors.Join(errs...)
}

// deleteTestNamespaces deletes every namespace but Kubernetes' own and
// waits for them to go (the kubelet stops their pods with their grace).
func (cfg Config) deleteTestNamespaces(ctx context.Context) error {
	cs, err := cfg.Client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	keep := []string{"default", "kube-system", "kube-public", "kube-node-lease"}
	var mine []string
	for _, ns := range nss.Items {
		if !slices.Contains(keep, ns.Name) {
			mine = append(mine, ns.Name)
			cs.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		}
	}
	for _, ns := range mine {
		for ctx.Err() == nil {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return ctx.Err()
}

// killOurShims kills containerd-shim-runc-v2 processes whose command line
// names this cluster's socket: a shim of any other containerd is left
// alone.
func (cfg Config) killOurShims(sock string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, "containerd-shim-runc-v2") && strings.Contains(cmd, sock) {
			pid, _ := strconv.Atoi(strings.Split(f, "/")[2])
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				cfg.Logf("killed shim %d", pid)
			}
		}
	}
}

func (cfg Config) undoHost(ctx context.Context) []error {
	var errs []error
	// Mounts under Run (overlay root filesystems, shm, kubelet volumes), deepest first.
	if f, err := os.Open("/proc/self/mounts"); err == nil {
		var mounts []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 1 && strings.HasPrefix(fields[1], cfg.Run()+"/") {
				mounts = append(mounts, fields[1])
			}
		}
		f.Close()
		slices.Sort(mounts)
		slices.Reverse(mounts)
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("umount %s: %w", m, err))
			}
		}
	}
	if out, err := output(ctx, "ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			if ns := strings.Fields(line); len(ns) > 0 && strings.HasPrefix(ns[0], "cni-") {
				if err := run(ctx, "ip", "netns", "delete", ns[0]); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if linkExists(podBridge) {
		if err := run(ctx, "ip", "link", "delete", podBridge); err != nil {
			errs = append(errs, err)
		}
	}
	h := cfg.loadHost()
	if linkExists(nodeBridge) && h.NodeBridge {
		if err := run(ctx, "ip", "link", "delete", nodeBridge); err != nil {
			errs = append(errs, err)
		}
	}
	h.NodeBridge = false
	// iptables: kube-proxy's own cleanup, then whatever KUBE-*/CNI-* chains remain, then our guard.
	if _, err := os.Stat(cfg.bin("kube-proxy")); err == nil {
		run(ctx, cfg.bin("kube-proxy"), "--cleanup")
	}
	for _, table := range []string{"filter", "nat", "mangle"} {
		rules, _ := output(ctx, "iptables", "-t", table, "-S")
		var chains []string
		for _, r := range strings.Split(rules, "\n") {
			f := strings.Fields(r)
			if len(f) >= 2 && f[0] == "-N" && (strings.HasPrefix(f[1], "KUBE-") || strings.HasPrefix(f[1], "CNI-")) {
				chains = append(chains, f[1])
			}
			// a rule in a built-in chain that jumps to one of those chains;
			// iptables -S quotes its words as a shell does
			if len(f) >= 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && !strings.HasPrefix(f[1], "CNI-") &&
				(strings.Contains(r, "-j KUBE-") || strings.Contains(r, "-j CNI-")) {
				run(ctx, "sh", "-c", "iptables -t "+table+" -D"+strings.TrimPrefix(r, "-A"))
			}
		}
		for _, ch := range chains {
			run(ctx, "iptables", "-t", table, "-F", ch)
		}
		for _, ch := range chains {
			run(ctx, "iptables", "-t", table, "-X", ch)
		}
	}
	if h.GuardRule || run(ctx, "iptables", append([]string{"-C"}, guardRule...)...) == nil {
		for run(ctx, "iptables", append([]string{"-D"}, guardRule...)...) == nil {
		}
	}
	h.GuardRule = false
	if err := cfg.saveHost(h); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	// Stragglers (only when a shim died uncleanly): processes still in the kubelet's pod cgroups.
	procsFiles, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods/**/cgroup.procs")
	deeper, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods/*/*/cgroup.procs")
	for _, f := range append(procsFiles, deeper...) {
		b, _ := os.ReadFile(f)
		for _, p := range strings.Fields(string(b)) {
			if pid, _ := strconv.Atoi(p); pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
				cfg.Logf("killed leftover pod process %d", pid)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	for _, r := range roots {
		var dirs []string
		filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs) // deepest first
		for _, d := range dirs {
			syscall.Rmdir(d)
		}
	}
	if err := cfg.restoreSysctls(true); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errs
}

package kube_test

import (
	"context"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lameduck/lameduck/e2e/kube/cluster"
)

// TestRollingRestartsUnderNFTables runs the chart's demo through rolling
// restarts with kube-proxy in its nftables mode (GA in Kubernetes 1.33),
// where the rest of the suite runs it in iptables mode: the Service must
// be routed by nft rules alone (its ClusterIP in kube-proxy's nft table,
// in no iptables rule), and lameduck must fail and re-send nothing for
// fresh connections and an HTTP/1.1 keep-alive pool (requests written on a
// connection the server had already closed counted apart, as in
// TestTrafficBesideControls), each pod exiting 0 by itself. kube-proxy
// goes back to iptables mode when the test ends.
func TestRollingRestartsUnderNFTables(t *testing.T) {
	needCluster(t)
	if err := cfg.SetProxyMode(t.Context(), cluster.ProxyNFTables); err != nil {
		t.Fatalf("kube-proxy in nftables mode (Debian's nftables package brings nft; the kernel needs nf_tables): %v", err)
	}
	t.Cleanup(func() {
		if err := cfg.SetProxyMode(context.Background(), cluster.ProxyIPTables); err != nil {
			t.Errorf("kube-proxy back in iptables mode: %v", err)
		}
	})
	e := newEnv(t, "nftables")
	e.helmInstall("lameduck-demo", nil)
	target := e.serviceURL("lameduck-demo")
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	nft, err := exec.CommandContext(t.Context(), "nft", "list", "table", "ip", "kube-proxy").CombinedOutput()
	if err != nil || !strings.Contains(string(nft), u.Hostname()) {
		t.Fatalf("the Service's ClusterIP %s is not in kube-proxy's nft table (nft list table ip kube-proxy: %v):\n%s", u.Hostname(), err, nft)
	}
	ipt, err := exec.CommandContext(t.Context(), "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil || strings.Contains(string(ipt), u.Hostname()) {
		t.Fatalf("iptables still routes the Service's ClusterIP %s, or cannot be read (%v): kube-proxy did not leave iptables mode", u.Hostname(), err)
	}
	pods := e.watchPods("demo")
	logs := e.followLogs("demo")
	shapes := []clientShape{fresh, keepAlive}
	loads := make([]*load, len(shapes))
	for i, s := range shapes {
		loads[i] = startShapedLoad(target, controlRate, s)
	}
	time.Sleep(2 * time.Second) // load before the first restart
	const rounds = 2
	e.restartRounds("lameduck-demo", rounds)
	time.Sleep(2 * time.Second) // load after the last old pod left
	for i, s := range shapes {
		r := loads[i].finish()
		t.Logf("nftables mode, %s: %s; examples: %q", s, r, r.Examples)
		if r.Total < controlRate*20 {
			t.Errorf("%s: only %d requests sent: the load did not run", s, r.Total)
		}
		if r.Failed-r.LateFailed != 0 || r.Resent-r.LateResent != 0 {
			t.Errorf("nftables mode, %s: %d requests failed and %d were re-sent (%d and %d of them written after the server closed the connection), want 0 and 0 besides those; examples: %q",
				s, r.Failed, r.Resent, r.LateFailed, r.LateResent, r.Examples)
		}
	}
	lives := pods.lives()
	logLives(t, lives)
	checkExits(t, lives, logs, 3*rounds, 0)
}

// Command kubecluster brings up, and takes down, the real one-node
// Kubernetes that lameduck's cluster tests (e2e/kube) run on. Run it as root
// from the repository's root:
//
//	go run ./e2e/kube/cmd/kubecluster up      # build what is missing, then start the cluster
//	go run ./e2e/kube/cmd/kubecluster status  # is it running, and where its kubeconfig is
//	go run ./e2e/kube/cmd/kubecluster down    # stop it and undo every change to the host
//	go run ./e2e/kube/cmd/kubecluster down --purge  # also delete its logs and certificates
//
// Binaries, images and the cluster's state live in $LDTEST_KUBE_WORK
// (default /var/tmp/lameduck-kube); $LDTEST_KUBE_VERSION picks the
// Kubernetes version (default v1.34.4). docs/kubernetes.md says what the
// cluster is made of and what it changes on the host.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lameduck/lameduck/e2e/kube/cluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cfg cluster.Config
	root := &cobra.Command{
		Use:           "kubecluster",
		Short:         "A real one-node Kubernetes for lameduck's cluster tests",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Build what is missing (12 to 14 min cold on 2 cores), then start the cluster (about 10s)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			repo, err := repoRoot()
			if err != nil {
				return err
			}
			if err := cluster.Up(cmd.Context(), cfg, repo); err != nil {
				return err
			}
			fmt.Printf("export KUBECONFIG=%s\n", cfg.Kubeconfig())
			return nil
		},
	}
	up.Flags().BoolVar(&cfg.SkipTraefik, "skip-traefik", false, "do not build Traefik, the suite's ingress (CI builds it in the background; the suite waits for it, $LDTEST_KUBE_TRAEFIK_WAIT)")
	root.AddCommand(up)
	root.AddCommand(&cobra.Command{
		Use:   "build",
		Short: "Build the Kubernetes binaries only",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cluster.Build(cmd.Context(), cfg) },
	})
	var purge bool
	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the cluster and undo every change it made to the host",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cluster.Down(cmd.Context(), cfg, purge) },
	}
	down.Flags().BoolVar(&purge, "purge", false, "also delete the cluster's logs, certificates and data (the built binaries stay)")
	root.AddCommand(down)
	root.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Say whether the cluster runs; exit 1 when it does not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if down := cfg.NotRunning(); len(down) > 0 {
				return fmt.Errorf("the cluster is not running (not running: %s): go run ./e2e/kube/cmd/kubecluster up", strings.Join(down, ", "))
			}
			fmt.Printf("running; export KUBECONFIG=%s (logs in %s)\n", cfg.Kubeconfig(), cfg.Logs())
			return nil
		},
	})
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kubecluster:", err)
		os.Exit(1)
	}
}

// repoRoot is the directory holding go.work, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.work above %s: run kubecluster from the lameduck repository", dir)
		}
	}
}

// Command kubebuild builds the binaries of the cluster the suite in e2e/kube
// runs on (Kubernetes' components, etcd and Traefik, package kubebuild),
// and nothing else: it imports no Kubernetes client, so it compiles in
// seconds where kubecluster takes minutes cold, and CI starts it first
// thing, in the background. `kubecluster up` builds what is missing too.
//
//	go run ./e2e/kube/cmd/kubebuild
//
// $LDTEST_KUBE_WORK and $LDTEST_KUBE_VERSION choose the directory and the
// Kubernetes version, as for kubecluster. It exits 1 when a build fails.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lameduck/lameduck/e2e/kube/kubebuild"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: kubebuild (no arguments; $LDTEST_KUBE_WORK and $LDTEST_KUBE_VERSION choose where and what)")
		os.Exit(2)
	}
	if err := kubebuild.Build(ctx, kubebuild.Target{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

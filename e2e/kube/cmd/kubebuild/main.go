// Command kubebuild builds the binaries of the cluster the suite in e2e/kube
// runs on (Kubernetes' components, etcd and Traefik, package kubebuild),
// and nothing else: it imports no Kubernetes client, so it compiles in
// seconds where kubecluster takes minutes cold, and CI starts it first
// thing, in the background. `kubecluster up` builds what is missing too.
//
//	go run ./e2e/kube/cmd/kubebuild             # both, at once
//	go run ./e2e/kube/cmd/kubebuild kubernetes  # what the cluster runs
//	go run ./e2e/kube/cmd/kubebuild traefik     # the suite's ingress
//
// $LDTEST_KUBE_WORK and $LDTEST_KUBE_VERSION choose the directory and the
// Kubernetes version, as for kubecluster. It exits 1 when a build fails and
// 2 on any other argument.
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
	build := kubebuild.Build
	switch {
	case len(os.Args) == 2 && os.Args[1] == "kubernetes":
		build = kubebuild.Kubernetes
	case len(os.Args) == 2 && os.Args[1] == "traefik":
		build = kubebuild.Traefik
	case len(os.Args) > 1:
		fmt.Fprintf(os.Stderr, "kubebuild: unknown argument %q: want nothing (both), kubernetes or traefik\n", os.Args[1:])
		os.Exit(2)
	}
	if err := build(ctx, kubebuild.Target{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

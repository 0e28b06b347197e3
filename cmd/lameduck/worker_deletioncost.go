package main

import (
	"fmt"
	"log/slog"
	"os"

	ldkube "github.com/lameduck/lameduck/contrib/kube"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// podDeletionCost is demo-worker --deletion-cost: the pod's own deletion
// cost, patched through the in-cluster client while a job runs. It returns
// an error naming what is missing outside a pod or without the downward
// API's variables.
func podDeletionCost(log *slog.Logger) (*ldkube.DeletionCost, error) {
	ns, pod := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || pod == "" {
		return nil, fmt.Errorf("lameduck: demo-worker --deletion-cost: POD_NAMESPACE=%q, POD_NAME=%q: set both from the downward API (metadata.namespace, metadata.name), or drop the flag", ns, pod)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("lameduck: demo-worker --deletion-cost: %w; it runs in a pod, with a service account token mounted", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("lameduck: demo-worker --deletion-cost: %w", err)
	}
	return ldkube.NewDeletionCost(cs, ns, pod, 0, log)
}

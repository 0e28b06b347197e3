// The cluster suite: lameduck on a real one-node Kubernetes (package
// cluster), through the real kubelet, EndpointSlice controller and
// kube-proxy. Bring the cluster up first, as root, from the repository's
// root:
//
//	go run ./e2e/kube/cmd/kubecluster up
//	go test -race -count=1 -timeout 30m ./e2e/kube/
//	go run ./e2e/kube/cmd/kubecluster down
//
// Without a running cluster every test skips, naming that command; with CI
// set, they fail instead. docs/kubernetes.md has the measured numbers.
package kube_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lameduck/lameduck/e2e/kube/cluster"
)

var (
	cfg       cluster.Config
	clusterUp bool   // the cluster runs and the images are imported
	whyNot    string // why the suite skips
	repo      string // the repository's root
)

// The images the suite runs, built from this checkout: the demo under the
// name the chart and deploy/k8s use by default (lameduck-demo:0.1.0 with
// imagePullPolicy IfNotPresent, so both run as shipped), and the naive
// reference server.
var (
	demoImage = cluster.Image{Name: "docker.io/library/lameduck-demo:0.1.0", Package: "./cmd/lameduck", Binary: "lameduck",
		Args: []string{"demo", "--addr=:8080", "--log-format=json"}}
	naiveImage = cluster.Image{Name: "localhost/naive:e2e", Package: "./e2e/kube/images/naive", Binary: "naive"}
	natsImage  = cluster.Image{Name: "localhost/nats:e2e", Package: "./e2e/kube/images/nats", Binary: "nats"}
	// traefikImage is the ingress controller, which `kubecluster build`
	// makes from Traefik's module outside go.work (cluster.Build), imported
	// by the first test that runs it (loadTraefikImage).
	traefikImage = cluster.Image{Name: "localhost/traefik:e2e", Binary: "traefik", Built: cfg.TraefikBin()}
)

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	repo = filepath.Join(wd, "..", "..")
	switch {
	case os.Geteuid() != 0:
		whyNot = "the cluster suite runs as root"
	case !cfg.Running():
		whyNot = "no cluster is running; start one with: go run ./e2e/kube/cmd/kubecluster up"
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		start := time.Now()
		if err := cluster.LoadImages(ctx, cfg, repo, demoImage, naiveImage, natsImage); err != nil {
			fmt.Fprintln(os.Stderr, "building the images:", err)
			cancel()
			os.Exit(1)
		}
		cancel()
		fmt.Fprintf(os.Stderr, "images built and imported in %.1fs\n", time.Since(start).Seconds())
		clusterUp = true
	}
	goleak.VerifyTestMain(m,
		goleak.Cleanup(func(code int) {
			if binDir != "" {
				os.RemoveAll(binDir)
			}
			os.Exit(code)
		}),
		// client-go's and klog's process-wide background goroutines
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

// needCluster skips the test (fails it under CI) without a running cluster.
func needCluster(t testing.TB) {
	t.Helper()
	if clusterUp {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set and the cluster suite cannot run: %s", whyNot)
	}
	t.Skip(whyNot)
}

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "lameduck-e2e-bin-") }

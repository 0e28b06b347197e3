// Package render holds the test that renders the lameduck-demo Helm chart
// with Helm's own template engine (helm.sh/helm/v3/pkg/engine, what
// `helm template` runs) and keeps the committed renderings in
// deploy/helm/rendered/ identical to it. `lameduck vet` is tested on those
// files, so the CLI's module does not compile Helm.
//
// Regenerate the files after changing the chart:
//
//	go test ./deploy/helm/render -update
package render

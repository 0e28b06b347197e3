package kube_test

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// kubeProxyProgramming reads kube-proxy's own histogram of the delay from
// an endpoint change to the iptables rules that apply it
// (kubeproxy_network_programming_duration_seconds): the gap the lame-duck
// window covers. It returns how many changes it saw, their mean and the
// upper bound of the bucket that holds the 95th percentile, in seconds.
func kubeProxyProgramming(t *testing.T) (count uint64, mean, p95 float64, err error) {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, 0, err
	}
	f, ok := families["kubeproxy_network_programming_duration_seconds"]
	if !ok || len(f.GetMetric()) == 0 {
		return 0, 0, 0, fmt.Errorf("kube-proxy exports no kubeproxy_network_programming_duration_seconds")
	}
	h := f.GetMetric()[0].GetHistogram()
	count = h.GetSampleCount()
	if count == 0 {
		return 0, 0, 0, fmt.Errorf("no endpoint change programmed yet")
	}
	buckets := slices.Clone(h.GetBucket())
	slices.SortFunc(buckets, func(a, b *dto.Bucket) int { return cmp.Compare(a.GetUpperBound(), b.GetUpperBound()) })
	for _, b := range buckets {
		if float64(b.GetCumulativeCount()) >= 0.95*float64(count) {
			p95 = b.GetUpperBound()
			break
		}
	}
	return count, h.GetSampleSum() / float64(count), p95, nil
}

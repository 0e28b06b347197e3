package ldprometheus_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/lameduck/lameduck"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// One call wires the metrics into a Lifecycle; serve /metrics beside the
// application's routes (the probes are answered by the Lifecycle itself).
func Example() {
	reg := prometheus.NewRegistry()
	lc, err := ldprometheus.New(lameduck.Config{
		LookupEnv: func(string) (string, bool) { return "", false }, // the example ignores LAMEDUCK_* variables
	}, reg)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if err := lc.AddServer(&http.Server{Addr: ":8080", Handler: mux}, nil); err != nil {
		log.Fatal(err)
	}
	// lc.Run(ctx) would serve; before it, the phase is "starting".

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "lameduck_phase" {
			continue
		}
		for _, m := range f.GetMetric() {
			fmt.Printf("lameduck_phase{phase=%q} %v\n", m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
		}
	}
	// Output:
	// lameduck_phase{phase="draining"} 0
	// lameduck_phase{phase="serving"} 0
	// lameduck_phase{phase="starting"} 1
	// lameduck_phase{phase="stopped"} 0
	// lameduck_phase{phase="stopping"} 0
}

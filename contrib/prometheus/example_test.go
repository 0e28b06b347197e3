package ldprometheus_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/lameduck/lameduck"
	ldprometheus "github.com/lameduck/lameduck/contrib/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// One call attaches the metrics to the Config; lameduck.New builds the
// Lifecycle from it. Serve /metrics on a listener of its own, outside the
// Lifecycle, and shut it down after Run returns: the teardown closes the
// application's and the probe listeners before the shutdown ends, and a
// scrape should read it to the end (docs/prometheus.md, "Where to serve
// /metrics").
func Example() {
	reg := prometheus.NewRegistry()
	cfg := lameduck.Config{
		LookupEnv: func(string) (string, bool) { return "", false }, // the example ignores LAMEDUCK_* variables
	}
	if err := ldprometheus.Instrument(&cfg, reg); err != nil {
		log.Fatal(err)
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	// The metrics listener is not registered with lc, so it outlives the teardown:
	//	msrv := &http.Server{Addr: ":9091", Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	//	go msrv.ListenAndServe() // before lc.Run(ctx)
	//	msrv.Shutdown(ctx)       // after lc.Run returns
	// The application's routes go to the Lifecycle, which drains them.
	if err := lc.AddServer(&http.Server{Addr: ":8080", Handler: http.NewServeMux()}, nil); err != nil {
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

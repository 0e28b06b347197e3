package ldotel_test

import (
	"context"
	"fmt"

	"github.com/lameduck/lameduck"
	ldotel "github.com/lameduck/lameduck/contrib/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// One call attaches the metrics to the Config; lameduck.New builds the
// Lifecycle from it. Any MeterProvider reads them (here the SDK's with an
// in-memory reader; in production a periodic reader with an OTLP exporter,
// see docs/otel.md).
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	cfg := lameduck.Config{IgnoreSignals: true, LookupEnv: func(string) (string, bool) { return "", false }}
	if err := ldotel.Instrument(&cfg, mp); err != nil {
		fmt.Println(err)
		return
	}
	lc, err := lameduck.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = lc // add servers and checks, then lc.Run(ctx)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "lameduck.phase" {
			for _, p := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				if p.Value == 1 {
					phase, _ := p.Attributes.Value("lameduck.phase")
					fmt.Println(m.Name, phase.AsString(), m.Unit)
				}
			}
		}
	}
	// Output: lameduck.phase starting 1
}

package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// workerMetrics are the demo worker's counters, on a registry of their own
// (no global state), served at /metrics on the probe listener.
type workerMetrics struct {
	reg      *prometheus.Registry
	started  prometheus.Counter
	done     prometheus.Counter
	back     *prometheus.CounterVec
	requeued prometheus.Counter
	inFlight prometheus.Gauge
}

func newWorkerMetrics() *workerMetrics {
	m := &workerMetrics{
		reg: prometheus.NewRegistry(),
		started: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lameduck_demo_jobs_started_total", Help: "Jobs the demo worker started.",
		}),
		done: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lameduck_demo_jobs_done_total", Help: "Jobs the demo worker finished and acknowledged.",
		}),
		back: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lameduck_demo_jobs_handed_back_total", Help: "Jobs the demo worker handed back (NAK), by whether a delay was asked (a superseded runner).",
		}, []string{"delayed"}),
		requeued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lameduck_demo_jobs_requeued_total", Help: "Jobs the demo worker handed back at their last delivery (NATS MaxDeliver) by publishing a copy, so that a drain or a rollout never strands them; RabbitMQ hand-backs, copies too, count as handed back.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lameduck_demo_jobs_in_flight", Help: "Jobs the demo worker is running.",
		}),
	}
	m.reg.MustRegister(m.started, m.done, m.back, m.requeued, m.inFlight, prometheus.NewGoCollector())
	return m
}

// handler serves /metrics and answers 404 elsewhere.
func (m *workerMetrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}

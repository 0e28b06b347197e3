package main

import (
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads GET url (a /metrics) and parses it with Prometheus' text
// parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Timeout: reqTimeout}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d", url, resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return fams
}

// gaugeWith returns the value of fam's gauge whose label name is value.
func gaugeWith(t *testing.T, fams map[string]*dto.MetricFamily, fam, name, value string) float64 {
	t.Helper()
	f := fams[fam]
	if f == nil {
		t.Fatalf("no %s in the scrape", fam)
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s=%q} in the scrape", fam, name, value)
	return 0
}

// TestE2EMetricsScrapedThroughTheTeardown: with --metrics-addr, /metrics is
// served on a listener the Lifecycle never closes. A scrape taken during the
// teardown, after the application's listener has closed (the process is
// joining a background write), shows the stopping phase and the lame-duck
// window's duration; the process then exits 0.
func TestE2EMetricsScrapedThroughTheTeardown(t *testing.T) {
	p := startProc(t, env("LAMEDUCK_SHUTDOWN_DELAY", "1s", "LAMEDUCK_SHUTDOWN_TEARDOWN", "20s"),
		"--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	l := p.waitLog(`"demo: metrics listening"`, startTimeout, msgContains("demo: metrics listening"))
	metricsAddr, _ := l.rec["addr"].(string)
	p.listening()
	p.waitServing(startTimeout)
	url := "http://" + metricsAddr + "/metrics"
	if v := gaugeWith(t, scrape(t, url), "lameduck_phase", "phase", "serving"); v != 1 {
		t.Fatalf("lameduck_phase{phase=serving} = %v while serving", v)
	}
	if r := p.get("/metrics"); r.code != http.StatusNotFound {
		t.Errorf("GET /metrics on --addr = %d; want 404: /metrics is served on --metrics-addr only", r.code)
	}
	// A write the join waits for, long enough to scrape during it.
	c := newClient(t, false)
	if r := p.post(c, "/write?name=audit&d=4s"); r.code != http.StatusAccepted {
		t.Fatalf("POST /write = %s; want 202", r)
	}
	p.signal(syscall.SIGTERM)
	p.waitLog(`"HTTP drain done"`, 20*time.Second, msgContains("HTTP drain done"))
	if conn, err := net.DialTimeout("tcp", p.base[len("http://"):], time.Second); err == nil {
		conn.Close()
		t.Fatalf("the application's listener %s still accepts during the join", p.base)
	}
	fams := scrape(t, url)
	if v := gaugeWith(t, fams, "lameduck_phase", "phase", "stopping"); v != 1 {
		t.Fatalf("lameduck_phase{phase=stopping} = %v during the teardown; want 1", v)
	}
	// The window's duration, read from the Lifecycle's clock: 1s, with the
	// time a loaded machine takes to notice it ended.
	if w := gaugeWith(t, fams, "lameduck_shutdown_step_duration_seconds", "step", "window"); w < 1 || w > 3 {
		t.Fatalf("lameduck_shutdown_step_duration_seconds{step=window} = %v; want the 1s window", w)
	}
	if code, _ := p.waitExit(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d; want 0:\n%s", code, p.output())
	}
}

// A bad --metrics-addr is a usage error that names the flag, before
// anything listens.
func TestE2EMetricsAddrBadValue(t *testing.T) {
	p := startCmd(t, nil, "demo", "--addr", "127.0.0.1:0", "--metrics-addr", "9091")
	if code, _ := p.waitExit(startTimeout); code != 2 {
		t.Fatalf("exit code %d; want 2 (usage):\n%s", code, p.output())
	}
	if !strings.Contains(p.output(), `--metrics-addr="9091"`) {
		t.Fatalf("the error does not name --metrics-addr:\n%s", p.output())
	}
}

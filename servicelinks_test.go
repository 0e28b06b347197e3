package lameduck_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/lameduck/lameduck"
)

// serviceLinks is what the kubelet injects for a Service: the variables the
// Kubernetes docs list for it (services-networking/service/#environment-variables),
// as seen on a real cluster for a Service "lameduck-demo" with port 80/TCP
// named "http", and one named "lameduck" with ports 80 and 9090/UDP.
func serviceLinks() map[string]string {
	return map[string]string{
		"LAMEDUCK_DEMO_SERVICE_HOST":      "10.96.0.237",
		"LAMEDUCK_DEMO_SERVICE_PORT":      "80",
		"LAMEDUCK_DEMO_SERVICE_PORT_HTTP": "80",
		"LAMEDUCK_DEMO_PORT":              "tcp://10.96.0.237:80",
		"LAMEDUCK_DEMO_PORT_80_TCP":       "tcp://10.96.0.237:80",
		"LAMEDUCK_DEMO_PORT_80_TCP_PROTO": "tcp",
		"LAMEDUCK_DEMO_PORT_80_TCP_PORT":  "80",
		"LAMEDUCK_DEMO_PORT_80_TCP_ADDR":  "10.96.0.237",
		"LAMEDUCK_SERVICE_HOST":           "fd00::12",
		"LAMEDUCK_SERVICE_PORT":           "80",
		"LAMEDUCK_PORT":                   "tcp://[fd00::12]:80",
		"LAMEDUCK_PORT_80_TCP":            "tcp://[fd00::12]:80",
		"LAMEDUCK_PORT_9090_UDP":          "udp://[fd00::12]:9090",
		"LAMEDUCK_PORT_9090_UDP_PROTO":    "udp",
		"LAMEDUCK_PORT_9090_UDP_PORT":     "9090",
		"LAMEDUCK_PORT_9090_UDP_ADDR":     "fd00::12",
	}
}

func TestServiceLinkVariablesAreNotSettings(t *testing.T) {
	vars := serviceLinks()
	vars["LAMEDUCK_SHUTDOWN_DELAY"] = "3s"
	lc, err := newFromEnv(t, vars, lameduck.Config{})
	if err != nil {
		t.Fatalf("the kubelet's service-link variables were refused: %v", err)
	}
	if d := lc.Config().ShutdownDelay; d.String() != "3s" {
		t.Fatalf("delay %s, want 3s", d)
	}
}

// Only the kubelet's exact family is let through: a misspelt setting, or a
// name of a service link's shape without its Service's host, or with a value
// the kubelet would never write, is still refused.
func TestServiceLinkLookalikesAreStillRefused(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{"LAMEDUCK_SHUTDOWN_DELAYS", "5s"},
		{"LAMEDUCK_PROBE_PORT", "9090"},                      // shape of <svc>_PORT, no LAMEDUCK_PROBE_SERVICE_HOST
		{"LAMEDUCK_PROBE_SERVICE_PORT", "9090"},              // idem
		{"LAMEDUCK_DEMO_PORT", "9090"},                       // the Service exists, but _PORT is a URL
		{"LAMEDUCK_DEMO_SERVICE_PORT", "http"},               // a port is a number
		{"LAMEDUCK_DEMO_PORT_80_TCP_PROTO", "http"},          // tcp, udp or sctp
		{"LAMEDUCK_DEMO_PORT_80_TCP_ADDR", "localhost"},      // an IP
		{"LAMEDUCK_DEMO_PORT_99999_TCP", "tcp://1.2.3.4:80"}, // no such port
		{"LAMEDUCK_OTHER_SERVICE_HOST", "not-an-ip"},
	} {
		vars := serviceLinks()
		vars[tc.key] = tc.value
		_, err := newFromEnv(t, vars, lameduck.Config{})
		if !errors.As(err, new(*lameduck.ConfigError)) || !strings.Contains(err.Error(), tc.key+"=") ||
			!strings.Contains(err.Error(), "not a lameduck setting") {
			t.Errorf("%s=%q: err = %v, want it refused as not a lameduck setting", tc.key, tc.value, err)
		}
		// and nothing else in the environment is named
		for k := range maps.Keys(serviceLinks()) {
			if k != tc.key && err != nil && strings.Contains(err.Error(), k+"=") {
				t.Errorf("%s=%q: the error also names the service link %s: %v", tc.key, tc.value, k, err)
			}
		}
	}
}

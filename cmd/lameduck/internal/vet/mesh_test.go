package vet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// meshPod is a pod whose application needs delay 5s + teardown 22s = 27s
// after the deletion, with annotations on its template.
func meshPod(annotations map[string]string, extra ...corev1.Container) Object {
	grace := int64(30)
	app := corev1.Container{
		Name: "app",
		Env:  []corev1.EnvVar{{Name: "LAMEDUCK_TERMINATION_GRACE", Value: "30s"}},
		ReadinessProbe: &corev1.Probe{TimeoutSeconds: 3, PeriodSeconds: 2, FailureThreshold: 2,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}},
	}
	return Object{Kind: "Pod", Name: "p", Annotations: annotations,
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: append([]corev1.Container{app}, extra...)}}
}

// TestMeshDrainReadsTheProxySettings: Istio's ProxyConfig is read as YAML
// (or JSON) by a YAML library, its terminationDrainDuration as a duration;
// Linkerd's wait and a proxy container's preStop as seconds; a value vet
// cannot read is a finding that says so, never a silent default.
func TestMeshDrainReadsTheProxySettings(t *testing.T) {
	sleep := func(s string) *corev1.Lifecycle {
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", s}}}}
	}
	for _, c := range []struct {
		name  string
		o     Object
		proxy float64 // the proxy's seconds in the finding; -1 for no finding, -2 for "cannot read"
	}{
		{"istio yaml", meshPod(map[string]string{istioConfig: "terminationDrainDuration: 10s\nholdApplicationUntilProxyStarts: true\n"}), 10},
		{"istio json", meshPod(map[string]string{istioConfig: `{"terminationDrainDuration": "1m"}`}), -1},
		{"istio minutes and seconds", meshPod(map[string]string{istioConfig: "terminationDrainDuration: 0m26.5s"}), 26.5},
		{"istio other fields only", meshPod(map[string]string{istioConfig: "concurrency: 2"}), 5},
		{"istio injected", meshPod(map[string]string{istioInject: "true"}), 5},
		{"istio not injected", meshPod(map[string]string{istioInject: "false"}), -1},
		{"istio a number", meshPod(map[string]string{istioConfig: "terminationDrainDuration: 30"}), -2},
		{"istio not yaml", meshPod(map[string]string{istioConfig: "terminationDrainDuration: [30s"}), -2},
		{"linkerd wait", meshPod(map[string]string{linkerdInject: "enabled", linkerdWait: "20"}), 20},
		{"linkerd long enough", meshPod(map[string]string{linkerdWait: "27"}), -1},
		{"linkerd injected", meshPod(map[string]string{linkerdInject: "enabled"}), 0},
		{"linkerd native", meshPod(map[string]string{linkerdInject: "enabled", linkerdNative: "true"}), -1},
		{"linkerd not seconds", meshPod(map[string]string{linkerdWait: "20s"}), -2},
		{"consul", meshPod(map[string]string{consulGrace: "15"}), 15},
		{"envoy container", meshPod(nil, corev1.Container{Name: "sidecar", Image: "envoyproxy/envoy:v1.31", Lifecycle: sleep("20")}), 20},
		{"envoy container long enough", meshPod(nil, corev1.Container{Name: "envoy", Image: "envoyproxy/envoy:v1.31", Lifecycle: sleep("30")}), -1},
		{"another container", meshPod(nil, corev1.Container{Name: "logger", Image: "fluent-bit:3"}), -1},
		{"no mesh", meshPod(nil), -1},
	} {
		fs, _ := Check([]Object{c.o}, Options{})
		var mesh []Finding
		for _, f := range fs {
			if f.Rule == "mesh-drain" {
				mesh = append(mesh, f)
			}
		}
		switch {
		case c.proxy == -1:
			if len(mesh) != 0 {
				t.Errorf("%s: %+v; want no mesh-drain finding", c.name, mesh)
			}
		case len(mesh) != 1:
			t.Errorf("%s: %d mesh-drain findings %+v; want 1", c.name, len(mesh), mesh)
		case c.proxy == -2:
			if !strings.Contains(mesh[0].Message, "vet cannot tell") || !strings.Contains(mesh[0].Fix, "at least 27s") {
				t.Errorf("%s: %+v; want a finding that the setting cannot be read", c.name, mesh[0])
			}
		default:
			v := mesh[0].Values
			if v["proxy_seconds"] != c.proxy || v["total_seconds"] != 27.0 || v["short_seconds"] != 27-c.proxy || v["want_seconds"] != int64(27) {
				t.Errorf("%s: values %v; want proxy %vs, total 27s, short %vs, want 27", c.name, v, c.proxy, 27-c.proxy)
			}
		}
	}
}

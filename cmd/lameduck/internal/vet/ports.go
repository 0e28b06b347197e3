package vet

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// resolvePortText resolves a probe's port as the kubelet does: a number,
// or the name of one of the container's ports, or else a number written as
// a string.
func resolvePortText(s string, ports []corev1.ContainerPort) (int, bool) {
	for _, p := range ports {
		if p.Name != "" && p.Name == s {
			return int(p.ContainerPort), true
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0 && n < 65536
}

func resolvePort(p intstr.IntOrString, ports []corev1.ContainerPort) (int, bool) {
	if p.Type == intstr.Int {
		return int(p.IntVal), p.IntVal > 0 && p.IntVal < 65536
	}
	return resolvePortText(p.StrVal, ports)
}

// probeTarget is one request the kubelet makes to a container: a probe, or
// the preStop hook over HTTP.
type probeTarget struct {
	name  string // "livenessProbe", "lifecycle.preStop"
	steps []any  // from the container to the port field
	grpc  bool
	port  intstr.IntOrString
}

// namedProbe is one of a container's probes, with the name of its field.
type namedProbe struct {
	name string // "livenessProbe", "readinessProbe", "startupProbe"
	p    *corev1.Probe
}

// probesOf returns c's liveness, readiness and startup probes, in that
// order, nil for one it does not have.
func probesOf(c corev1.Container) []namedProbe {
	return []namedProbe{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}}
}

func probeTargets(c corev1.Container) []probeTarget {
	var out []probeTarget
	for _, p := range probesOf(c) {
		switch {
		case p.p == nil:
		case p.p.HTTPGet != nil:
			out = append(out, probeTarget{name: p.name, steps: []any{p.name, "httpGet", "port"}, port: p.p.HTTPGet.Port})
		case p.p.GRPC != nil:
			out = append(out, probeTarget{name: p.name, steps: []any{p.name, "grpc", "port"}, grpc: true, port: intstr.FromInt32(p.p.GRPC.Port)})
		}
	}
	if h := preStopHTTP(c); h != nil {
		out = append(out, probeTarget{name: "lifecycle.preStop", steps: []any{"lifecycle", "preStop", "httpGet", "port"}, port: h.Port})
	}
	return out
}

// checkProbePorts is probe-port: every HTTP probe (and the /prestop hook)
// must target the port that serves lameduck's probes, and every gRPC probe
// the gRPC server's, at the line of the probe's port.
//
// With LAMEDUCK_PROBE_ADDR set (a runner's default is :9090), the HTTP
// probes are served there and nowhere else, on an address the kubelet can
// reach (not loopback), and that port speaks no gRPC. Without it, they are
// served on the application's own listeners: a probe on a port the
// container does not declare (when it declares any) reaches none of them.
// A named port that the container does not declare cannot be resolved by
// the kubelet at all.
func checkProbePorts(j *judged) []Finding {
	rc := j.rc
	var declared []int
	for _, p := range j.c.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			declared = append(declared, int(p.ContainerPort))
		}
	}
	addrSrc := j.res.Sources["PROBE_ADDR"]
	serving, host, known := 0, "", false
	if rc.ProbeAddr != "" {
		h, p, err := net.SplitHostPort(rc.ProbeAddr)
		if n, err2 := strconv.Atoi(p); err == nil && err2 == nil {
			serving, host, known = n, h, true
		}
	}
	var out []Finding
	if known && isLoopback(host) {
		line, path := j.envField(rc.EnvPrefix + "PROBE_ADDR")
		out = append(out, j.finding("probe-port", line, path,
			fmt.Sprintf("%sPROBE_ADDR=%s listens on loopback only, but the kubelet probes the pod's IP: every probe fails, and the pod never becomes ready", rc.EnvPrefix, rc.ProbeAddr),
			fmt.Sprintf("set %sPROBE_ADDR=:%d, which listens on every address of the pod", rc.EnvPrefix, serving),
			map[string]any{"setting": rc.EnvPrefix + "PROBE_ADDR", "serving_port": serving, "host": host}))
		return out
	}
	for _, t := range probeTargets(j.c) {
		if t.port.String() == "" || t.port.String() == "0" {
			continue // the API server refuses a probe without a port
		}
		line, path := j.field(t.steps...)
		port, ok := resolvePort(t.port, j.c.Ports)
		values := map[string]any{"probe": t.name, "port": t.port.String()}
		if ok {
			values["port_number"] = port
		}
		add := func(msg, fix string) {
			out = append(out, j.finding("probe-port", line, path, msg, fix, values))
		}
		if !ok {
			add(fmt.Sprintf("%s targets port %q, which is not the name of one of the container's ports: the kubelet cannot resolve it and the probe fails", t.name, t.port.String()),
				"name one of the container's ports, or give the port number")
			continue
		}
		switch {
		case t.grpc && known && port == serving:
			values["serving_port"] = serving
			add(fmt.Sprintf("%s is a gRPC probe on port %d, which is %sPROBE_ADDR's HTTP listener (%s): it speaks no gRPC, so the probe fails",
				t.name, port, rc.EnvPrefix, rc.ProbeAddr),
				"point the gRPC probe at the gRPC server's port, where contrib/grpc serves the health service")
		case t.grpc:
			if len(declared) > 0 && !slices.Contains(declared, port) {
				values["declared_ports"] = declared
				add(fmt.Sprintf("%s is a gRPC probe on port %d, which the container does not declare (its ports: %s): nothing of it listens there that vet can see",
					t.name, port, intsText(declared)),
					"point it at the gRPC server's port, or declare that port in ports")
			}
		case known && port != serving:
			values["serving_port"] = serving
			values["setting"] = rc.EnvPrefix + "PROBE_ADDR"
			src := ""
			if addrSrc != rc.EnvPrefix+"PROBE_ADDR" {
				src = " (" + addrSrc + ")"
			}
			add(fmt.Sprintf("%s targets port %d, but %sPROBE_ADDR=%s%s serves the probes on port %d: the application's listeners answer them with the application's own routes, or nothing",
				t.name, port, rc.EnvPrefix, rc.ProbeAddr, src, serving),
				fmt.Sprintf("point %s at port %d (declare it in ports and use its name)", t.name, serving))
		case !known && rc.ProbeAddr == "" && len(declared) > 0 && !slices.Contains(declared, port):
			values["declared_ports"] = declared
			add(fmt.Sprintf("%s targets port %d, but without %sPROBE_ADDR the probes are served on the application's own listeners, and the container declares no port %d (its ports: %s)",
				t.name, port, rc.EnvPrefix, port, intsText(declared)),
				fmt.Sprintf("point %s at the application's port, or serve the probes on their own port with %sPROBE_ADDR=:%d", t.name, rc.EnvPrefix, port))
		}
	}
	return out
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func intsText(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

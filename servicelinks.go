package lameduck

import (
	"net/netip"
	"strconv"
	"strings"
)

// Kubernetes' service links: the kubelet gives every container, for every
// Service in its namespace (unless the pod sets enableServiceLinks: false),
// the variables of the Docker links convention, named after the Service
// (upper case, "-" as "_"). For a Service "lameduck-demo" with port 80/TCP
// named "http":
//
//	LAMEDUCK_DEMO_SERVICE_HOST=10.96.0.237
//	LAMEDUCK_DEMO_SERVICE_PORT=80
//	LAMEDUCK_DEMO_SERVICE_PORT_HTTP=80
//	LAMEDUCK_DEMO_PORT=tcp://10.96.0.237:80
//	LAMEDUCK_DEMO_PORT_80_TCP=tcp://10.96.0.237:80
//	LAMEDUCK_DEMO_PORT_80_TCP_PROTO=tcp
//	LAMEDUCK_DEMO_PORT_80_TCP_PORT=80
//	LAMEDUCK_DEMO_PORT_80_TCP_ADDR=10.96.0.237
//
// (https://kubernetes.io/docs/concepts/services-networking/service/#environment-variables;
// the kubelet's pkg/kubelet/envvars). A Service whose name starts with
// "lameduck" thus puts LAMEDUCK_ variables into every pod of the namespace,
// whatever those pods are called. isServiceLink tells such a variable from
// a misspelt setting: its name has one of the shapes above, its value has
// the form the kubelet writes for that shape, and the same Service's
// <NAME>_SERVICE_HOST is set to an IP address, as the kubelet always sets it
// alongside the others. A typo of a real setting (LAMEDUCK_SHUTDOWN_DELAYS,
// or LAMEDUCK_PROBE_PORT=9090 with no LAMEDUCK_PROBE_SERVICE_HOST) matches
// none of this and is still refused.
func isServiceLink(key, value string, lookup func(string) (string, bool)) bool {
	for _, c := range serviceLinkShapes(key) {
		if !serviceLinkValue(c.shape, value) {
			continue
		}
		if host, ok := lookup(c.base + "_SERVICE_HOST"); ok {
			if _, err := netip.ParseAddr(host); err == nil {
				return true
			}
		}
	}
	return false
}

// The value forms of the service-link variables.
const (
	linkIP    = iota // 10.96.0.237 (SERVICE_HOST, PORT_n_PROTO_ADDR)
	linkPort         // 80 (SERVICE_PORT, SERVICE_PORT_<name>, PORT_n_PROTO_PORT)
	linkURL          // tcp://10.96.0.237:80 (PORT, PORT_n_PROTO)
	linkProto        // tcp (PORT_n_PROTO_PROTO)
)

// A linkCandidate is one way to read a variable's name as a service link:
// the Service's part (with the prefix, so for a Service "lameduck-demo" the prefix and "DEMO", or "LAMEDUCK" for a
// Service named "lameduck") and the form its value then takes.
type linkCandidate struct {
	base  string
	shape int
}

// serviceLinkShapes lists every way key reads as a service-link variable.
// A name can read more than one way (a Service may itself be named
// "x-port-80-tcp"); the value and the Service's _SERVICE_HOST decide.
func serviceLinkShapes(key string) []linkCandidate {
	var out []linkCandidate
	if b, ok := strings.CutSuffix(key, "_SERVICE_HOST"); ok {
		out = append(out, linkCandidate{b, linkIP})
	}
	if b, ok := strings.CutSuffix(key, "_SERVICE_PORT"); ok {
		out = append(out, linkCandidate{b, linkPort})
	}
	if b, ok := strings.CutSuffix(key, "_PORT"); ok {
		out = append(out, linkCandidate{b, linkURL})
	}
	parts := strings.Split(key, "_")
	for i := 1; i < len(parts)-1; i++ {
		if parts[i] != "SERVICE" || parts[i+1] != "PORT" || i+2 >= len(parts) {
			continue
		}
		// <base>_SERVICE_PORT_<port name>
		out = append(out, linkCandidate{strings.Join(parts[:i], "_"), linkPort})
	}
	// <base>_PORT_<number>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR]
	for i := 1; i < len(parts)-2; i++ {
		rest := parts[i+1:]
		if parts[i] != "PORT" || len(rest) > 3 || !isPortNumber(rest[0]) {
			continue
		}
		switch rest[1] {
		case "TCP", "UDP", "SCTP":
		default:
			continue
		}
		base := strings.Join(parts[:i], "_")
		if len(rest) == 2 {
			out = append(out, linkCandidate{base, linkURL})
			continue
		}
		switch rest[2] {
		case "PROTO":
			out = append(out, linkCandidate{base, linkProto})
		case "PORT":
			out = append(out, linkCandidate{base, linkPort})
		case "ADDR":
			out = append(out, linkCandidate{base, linkIP})
		}
	}
	return out
}

func isPortNumber(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 65536 && strconv.Itoa(n) == s
}

// serviceLinkValue reports whether value has the form the kubelet writes
// for a variable of that shape.
func serviceLinkValue(shape int, value string) bool {
	switch shape {
	case linkIP:
		_, err := netip.ParseAddr(value)
		return err == nil
	case linkPort:
		return isPortNumber(value)
	case linkProto:
		return value == "tcp" || value == "udp" || value == "sctp"
	case linkURL:
		proto, addr, ok := strings.Cut(value, "://")
		if !ok || (proto != "tcp" && proto != "udp" && proto != "sctp") {
			return false
		}
		ap, err := netip.ParseAddrPort(addr)
		return err == nil && ap.Port() != 0
	}
	return false
}

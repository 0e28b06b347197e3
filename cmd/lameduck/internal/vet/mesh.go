package vet

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The service-mesh settings vet reads in a pod template: how long the
// mesh's proxy keeps the pod's outbound traffic flowing after the pod is
// deleted.
const (
	// istioConfig is Istio's per-pod ProxyConfig, YAML (or JSON) text;
	// its terminationDrainDuration (5s when unset) is how long the proxy
	// drains after its SIGTERM before it exits
	// (https://istio.io/latest/docs/reference/config/istio.mesh.v1alpha1/#ProxyConfig).
	istioConfig      = "proxy.istio.io/config"
	istioInject      = "sidecar.istio.io/inject"
	istioDefaultTerm = 5 * time.Second
	// linkerdWait is Linkerd's preStop sleep of its proxy, in whole
	// seconds (none when unset): the proxy starts its shutdown only after
	// it (https://linkerd.io/2/tasks/graceful-shutdown/).
	linkerdWait   = "config.alpha.linkerd.io/proxy-wait-before-exit-seconds"
	linkerdInject = "linkerd.io/inject"
	// linkerdNative runs Linkerd's proxy as a native sidecar, which the
	// kubelet stops after the application.
	linkerdNative = "config.beta.linkerd.io/proxy-enable-native-sidecar"
	// consulGrace is Consul's shutdown grace period of its injected
	// proxy, in whole seconds (consul-k8s' sidecar proxy lifecycle).
	consulGrace = "consul.hashicorp.com/sidecar-proxy-lifecycle-shutdown-grace-period-seconds"
)

// proxyNames are the names (in a container's name or image) of the proxies
// that a pod declares as a container of its own: their preStop sleep is how
// long they outlive the deletion.
var proxyNames = []string{"istio-proxy", "linkerd-proxy", "envoy", "consul-dataplane", "cloud-sql-proxy"}

// meshProxy is one proxy in front of the pod's outbound calls and how long
// it keeps them flowing after the pod is deleted.
type meshProxy struct {
	name    string        // "Istio proxy", "Linkerd proxy", "Consul proxy", `proxy container "envoy"`
	setting string        // what sets its time: an annotation, "preStop"
	says    string        // how the manifest sets it, for the message
	d       time.Duration // how long it keeps serving after the deletion
	def     bool          // d is the mesh's default: the setting is absent
	at      place         // the setting's place (the closest parent when absent)
	fix     string
	bad     string // the setting's text when vet cannot read it
}

// parseSeconds sets p.d from text, the value of the annotation key, a
// whole number of seconds, and p.bad when text is not one.
func (p *meshProxy) parseSeconds(key, text string) {
	n, err := strconv.ParseInt(text, 10, 32)
	if err != nil || n < 0 {
		p.bad = fmt.Sprintf("%s=%q is not a whole number of seconds", key, text)
	}
	p.d = time.Duration(n) * time.Second
}

// meshProxies lists the proxies o's pod template shows: Istio's and
// Linkerd's when their annotation (or the injection label or annotation)
// is there, Consul's when its grace annotation is, and a proxy declared as
// a regular container. A proxy that runs as a native sidecar (an init
// container with restartPolicy Always, or Linkerd's native-sidecar
// annotation) is not listed: the kubelet stops it only after the regular
// containers have exited, and pod-grace checks that the grace period
// leaves it time.
func meshProxies(o *Object) []meshProxy {
	var out []meshProxy
	meta := func(key string) (string, place, bool) {
		if v, ok := o.Annotations[key]; ok {
			return v, o.meta.at("annotations", key), true
		}
		if v, ok := o.Labels[key]; ok {
			return v, o.meta.at("labels", key), true
		}
		return "", o.meta, false
	}
	if text, at, ok := meta(istioConfig); ok {
		p := meshProxy{name: "Istio proxy", setting: istioConfig, at: at, d: istioDefaultTerm, def: true,
			says: "terminationDrainDuration unset in " + istioConfig + ": Istio's default 5s"}
		var cfg map[string]any
		err := yaml.Unmarshal([]byte(text), &cfg)
		switch v, set := cfg["terminationDrainDuration"]; {
		case err != nil:
			p.bad = fmt.Sprintf("%s is not YAML: %v", istioConfig, err)
		case set:
			s, isString := v.(string)
			d, perr := time.ParseDuration(s)
			if !isString || perr != nil || d < 0 {
				p.bad = fmt.Sprintf("%s terminationDrainDuration %v is not a duration such as \"30s\"", istioConfig, v)
			}
			p.d, p.def = d, false
			p.says = fmt.Sprintf("terminationDrainDuration %s in %s", s, istioConfig)
		}
		out = append(out, p)
	} else if v, at, ok := meta(istioInject); ok && v == "true" {
		out = append(out, meshProxy{name: "Istio proxy", setting: istioConfig, at: at, d: istioDefaultTerm, def: true,
			says: istioInject + " without " + istioConfig + ": Istio's default terminationDrainDuration 5s"})
	}
	if v, _, _ := meta(linkerdNative); v != "true" {
		if text, at, ok := meta(linkerdWait); ok {
			p := meshProxy{name: "Linkerd proxy", setting: linkerdWait, at: at, says: fmt.Sprintf("%s %q; its shutdown then refuses new requests at once", linkerdWait, text)}
			p.parseSeconds(linkerdWait, text)
			out = append(out, p)
		} else if v, at, ok := meta(linkerdInject); ok && v == "enabled" {
			out = append(out, meshProxy{name: "Linkerd proxy", setting: linkerdWait, at: at, def: true,
				says: linkerdInject + " without " + linkerdWait + ": it refuses new requests from its SIGTERM on"})
		}
	}
	if text, at, ok := meta(consulGrace); ok {
		p := meshProxy{name: "Consul proxy", setting: consulGrace, at: at, says: fmt.Sprintf("%s %q", consulGrace, text)}
		p.parseSeconds(consulGrace, text)
		out = append(out, p)
	}
	for i, c := range o.Spec.Containers {
		for _, n := range proxyNames {
			if strings.Contains(c.Name, n) || strings.Contains(c.Image, n) {
				ps := preStopTime(c)
				at := o.spec.key("containers").item(i)
				if ps.hook != nil {
					at = at.at("lifecycle", "preStop")
				}
				says := "a regular container with no preStop hook: it gets SIGTERM with the application"
				if ps.hook != nil {
					says = fmt.Sprintf("a regular container whose preStop takes %s: then it gets SIGTERM", ps.d)
				}
				out = append(out, meshProxy{name: fmt.Sprintf("proxy container %q", c.Name), setting: "preStop", d: ps.d, def: ps.hook == nil, at: at, says: says})
				break
			}
		}
	}
	return out
}

// checkMeshDrain is mesh-drain (a warning): a service-mesh proxy that stops
// before the application has finished its shutdown cuts the outbound calls
// it makes while it drains: a request in flight that calls a dependency
// fails, a runner loses its queue connection. The application needs its
// grace-period sum (preStop + window, or a runner's drain bound, +
// teardown) after the deletion; each proxy the pod template shows
// (meshProxies) must keep serving at least that long. Not for a native
// sidecar's own shutdown, which starts after the application's; silent
// while a setting is refused and for a preStop that never returns. At the
// proxy's setting (its annotation, or the container's preStop).
func checkMeshDrain(j *judged) []Finding {
	if j.sidecar || j.refused() || j.ps.forever {
		return nil
	}
	b := j.budget()
	var out []Finding
	for _, p := range meshProxies(j.o) {
		line, path := j.o.lineOf(p.at), p.at.path
		if p.bad != "" {
			out = append(out, j.finding("mesh-drain", line, path,
				p.bad+": vet cannot tell how long the proxy outlives the application's shutdown",
				fmt.Sprintf("write it as the mesh documents it, at least %s", b.Total),
				map[string]any{"proxy": p.name, "setting": p.setting}))
			continue
		}
		if p.d >= b.Total {
			continue
		}
		want := ceilSeconds(b.Total)
		var fix string
		switch p.name {
		case "Istio proxy":
			fix = fmt.Sprintf(`set the pod template's annotation %s: '{"terminationDrainDuration": "%ds"}', or run the proxy as a native sidecar, which the kubelet stops after the application`, istioConfig, want)
		case "Linkerd proxy":
			fix = fmt.Sprintf(`set the pod template's annotation %s: "%d", or %s: "true" (a native sidecar, stopped after the application)`, linkerdWait, want, linkerdNative)
		case "Consul proxy":
			fix = fmt.Sprintf(`set the pod template's annotation %s: "%d"`, consulGrace, want)
		default:
			fix = fmt.Sprintf("make the proxy a native sidecar (an init container with restartPolicy: Always), which the kubelet stops after the application, or give it a preStop sleep of at least %ds", want)
		}
		out = append(out, j.finding("mesh-drain", line, path,
			fmt.Sprintf("the %s keeps outbound traffic flowing %s after the deletion (%s), but the application needs %s: %s; the calls it makes in the last %s fail",
				p.name, p.d, p.says, b.Total, b.Sum(), b.Total-p.d),
			fix,
			map[string]any{"proxy": p.name, "setting": p.setting, "proxy_seconds": seconds(p.d), "proxy_default": p.def,
				"prestop_seconds": seconds(b.PreStop), "window_seconds": seconds(b.Window), "window_setting": b.EnvPrefix + b.WindowSetting,
				"teardown_seconds": seconds(b.Teardown), "total_seconds": seconds(b.Total), "short_seconds": seconds(b.Total - p.d),
				"want_seconds": want}))
	}
	return out
}

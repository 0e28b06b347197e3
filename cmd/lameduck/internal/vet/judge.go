package vet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/worker"
	corev1 "k8s.io/api/core/v1"
)

// envPrefix is the prefix of the variables the binary reads, the default
// of lameduck.Config.EnvPrefix, which the containers vet judges use
// (TestEnvPrefixIsTheResolvers holds it to the resolver's).
const envPrefix = "LAMEDUCK_"

// tokenHeader is the header a preStop httpGet hook carries the binary's
// LAMEDUCK_PRESTOP_TOKEN in (TestTokenHeaderIsTheBinarys holds it to the
// one the binary reads).
const tokenHeader = "X-Lameduck-Token"

// podContainer is one long-running container of a pod: a regular
// container, or a native sidecar (an init container with restartPolicy
// Always, which runs beside them and stops after them).
type podContainer struct {
	c       corev1.Container
	at      place // the container's entry in the file
	sidecar bool
}

// podContainers lists o's regular containers, then its native sidecars.
// Init containers that run to completion serve no probe and are left out.
func podContainers(o *Object) []podContainer {
	var out []podContainer
	for i, c := range o.Spec.Containers {
		out = append(out, podContainer{c: c, at: o.spec.key("containers").item(i)})
	}
	for i, c := range o.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, podContainer{c: c, at: o.spec.key("initContainers").item(i), sidecar: true})
		}
	}
	return out
}

// judged is one container vet judges: what the manifest says, and what
// the binary would resolve from it inside a pod.
type judged struct {
	o *Object
	podContainer
	runner bool
	// signs say why the container is judged: "sets LAMEDUCK_ENV",
	// "livenessProbe is httpGet /readyz, a path lameduck serves", ...
	signs []string
	// res and errs are lameduck.Resolve's answer for the container's
	// environment, as inside a pod; rc is res.Config.
	res  lameduck.Resolved
	errs []error
	rc   *lameduck.Config
	ps   preStop
}

// lineOf is the file line of a place in o, or o's own line when the place
// is unknown (an Object built in code).
func (o *Object) lineOf(p place) int {
	if p.n == nil {
		return o.Line
	}
	return p.line
}

// field returns the line and the path of a field of the container (steps
// from its entry; none for the entry itself).
func (j *judged) field(steps ...any) (int, string) {
	return j.o.lineOf(j.at.at(steps...)), j.at.at(steps...).path
}

// podField is field for a field of the pod spec.
func (j *judged) podField(steps ...any) (int, string) {
	return j.o.lineOf(j.o.spec.at(steps...)), j.o.spec.at(steps...).path
}

// envField is the line and path of the container's env entry name (the
// one that wins), or of env, or of the container, when absent.
func (j *judged) envField(name string) (int, string) {
	if e, i := j.at.key("env").named(name); i >= 0 {
		return j.o.lineOf(e), e.path
	}
	return j.field("env")
}

// finding builds a finding of rule id at line and path.
func (j *judged) finding(id string, line int, path, msg, fix string, values map[string]any) Finding {
	return Finding{Rule: id, Level: rule(id).Level, Object: j.o.Ref(), Container: j.c.Name, File: j.o.File,
		Line: line, Field: path, Message: msg, Fix: fix, Values: values}
}

// judge decides whether k runs lameduck, by any sign the manifest shows: a
// LAMEDUCK_* variable, --container or --runner, or a probe (or the preStop
// hook) on a path lameduck serves, as the binary would resolve its paths
// from this environment (the defaults when no variable renames them). It
// returns the judged container, or nil and why it was skipped.
func judge(o *Object, k podContainer, opt Options) (*judged, string) {
	if slices.Contains(opt.Skip, k.c.Name) {
		return nil, "named with --skip"
	}
	j := &judged{o: o, podContainer: k, signs: declaredSigns(k.c, opt), runner: isRunner(k.c, opt)}
	j.resolve()
	j.signs = append(j.signs, j.servedSigns()...)
	if len(j.signs) == 0 {
		return nil, fmt.Sprintf("nothing says it runs lameduck: no %s* variable, no probe on a path lameduck serves (%s), not named with --container",
			envPrefix, strings.Join(append(slices.Clone(j.rc.LivenessPaths), j.rc.ReadinessPath, j.rc.StartupPath), ", "))
	}
	j.ps = preStopTime(k.c)
	return j, ""
}

// declaredSigns are the signs that c runs lameduck that need no
// resolution: a LAMEDUCK_* variable, --container, --runner.
func declaredSigns(c corev1.Container, opt Options) []string {
	var signs []string
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, envPrefix) {
			signs = append(signs, "sets "+e.Name)
			break
		}
	}
	if slices.Contains(opt.Containers, c.Name) {
		signs = append(signs, "named with --container")
	}
	if slices.Contains(opt.Runners, c.Name) {
		signs = append(signs, "named with --runner")
	}
	return signs
}

// resolve reads the container's environment as the binary would: a
// server's by lameduck.Resolve, a runner's by package worker's own
// resolver (its rows, defaults and drain modes beside the Lifecycle's).
func (j *judged) resolve() {
	var cfg lameduck.Config
	cfg.LookupEnv, cfg.Environ = envList(environment(j.c))
	if j.runner {
		var res worker.Resolved
		res, j.errs = worker.Resolve(worker.Config{Lifecycle: cfg})
		j.res = res.Resolved
	} else {
		j.res, j.errs = lameduck.Resolve(cfg)
	}
	j.rc = &j.res.Config
}

// servedSigns are the signs that the container runs lameduck in its
// probes and preStop hook: a path lameduck serves (as resolved from its
// environment), or a gRPC health service it answers.
func (j *judged) servedSigns() []string {
	var signs []string
	for _, p := range probesOf(j.c) {
		switch {
		case p.p == nil:
		case p.p.HTTPGet != nil && servedPath(p.p.HTTPGet.Path, j.rc):
			signs = append(signs, fmt.Sprintf("%s is httpGet %s, a path lameduck serves", p.name, p.p.HTTPGet.Path))
		case p.p.GRPC != nil && (grpcService(p.p.GRPC) == grpcLiveness || grpcService(p.p.GRPC) == grpcReadiness):
			signs = append(signs, fmt.Sprintf("%s asks the gRPC health service %q, which lameduck answers", p.name, grpcService(p.p.GRPC)))
		}
	}
	if h := preStopHTTP(j.c); h != nil && atPath(h.Path, j.rc.PreStopPath, false) {
		signs = append(signs, "its preStop hook is httpGet "+h.Path)
	}
	return signs
}

// isRunner reports whether c runs lameduck's worker package: named so,
// running demo-worker, setting a runner's epoch or fetch settings, or a
// drain mode the binary accepts for a runner only (complete, interrupt),
// as its own resolver reads it.
func isRunner(c corev1.Container, opt Options) bool {
	if slices.Contains(opt.Runners, c.Name) || slices.Contains(c.Args, "demo-worker") || slices.Contains(c.Command, "demo-worker") {
		return true
	}
	for _, e := range c.Env {
		switch strings.TrimPrefix(e.Name, envPrefix) {
		case "EPOCH", "EPOCH_MISMATCH_DELAY", "FETCH_WAIT", "FAILURE_BACKOFF", "FAILURE_BACKOFF_MAX":
			return true
		}
	}
	// Resolved as a runner, DRAIN_MODE comes from the variable only when
	// the binary accepts it as a runner's mode.
	var cfg lameduck.Config
	cfg.LookupEnv, cfg.Environ = envList(environment(c))
	res, _ := worker.Resolve(worker.Config{Lifecycle: cfg})
	return res.Sources["DRAIN_MODE"] == envPrefix+"DRAIN_MODE"
}

// environment returns the container's environment as the process sees it
// inside a pod: KUBERNETES_SERVICE_HOST (the kubelet sets it), then env in
// order. A value from a Secret stands in for the secret's text when it is
// LAMEDUCK_PRESTOP_TOKEN (any non-empty token); other valueFrom variables
// are unknown and count as unset. LAMEDUCK_PRESTOP_TOKEN_FILE names a file
// in the pod (a mounted Secret) that vet cannot read: it stands for a token
// from that file, unless LAMEDUCK_PRESTOP_TOKEN is set too, which the
// binary refuses.
func environment(c corev1.Container) []string {
	kv := []string{"KUBERNETES_SERVICE_HOST=10.0.0.1"}
	tokenSet := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == envPrefix+"PRESTOP_TOKEN"
	})
	for _, e := range c.Env {
		switch {
		case e.Name == envPrefix+"PRESTOP_TOKEN_FILE" && e.ValueFrom == nil && e.Value != "" && !tokenSet:
			kv = append(kv, envPrefix+"PRESTOP_TOKEN=(from file "+e.Value+")")
		case e.ValueFrom == nil:
			kv = append(kv, e.Name+"="+e.Value)
		case e.Name == envPrefix+"PRESTOP_TOKEN":
			kv = append(kv, e.Name+"=(from "+valueSource(e.ValueFrom)+")")
		default:
			kv = append(kv, e.Name) // known name, unknown value
		}
	}
	return kv
}

// envList returns a LookupEnv and an Environ for lameduck.Config that read
// only kv: "KEY=value" strings, as environment returns them. When a key
// appears twice, the later entry wins, as in a pod spec; an entry without
// "=" is a key with an empty value (unset, for lameduck). Both functions
// are safe for concurrent use.
func envList(kv []string) (lookup func(key string) (string, bool), environ func() []string) {
	m := make(map[string]string, len(kv))
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	list := slices.Clone(kv)
	return func(key string) (string, bool) { v, ok := m[key]; return v, ok },
		func() []string { return slices.Clone(list) }
}

func valueSource(v *corev1.EnvVarSource) string {
	switch {
	case v.SecretKeyRef != nil:
		return "secret " + v.SecretKeyRef.Name
	case v.ConfigMapKeyRef != nil:
		return "configmap " + v.ConfigMapKeyRef.Name
	}
	return "a field"
}

// seconds is d in seconds, for Finding.Values.
func seconds(d time.Duration) float64 { return d.Seconds() }

package kube_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lameduck/lameduck/e2e/kube/cluster"
)

// traefikArgs are Traefik's flags in the suite: its Kubernetes Ingress
// provider watching the test's namespace only (so a Role is all it may
// read, and two contenders' ingresses never see each other), an entry
// point for the load and one for its /ping. Everything else is Traefik's
// default, as users run it: the provider's 2s throttle, the forwarding
// transport's keep-alive pool, no retries.
func traefikArgs(ns string) []string {
	return []string{
		"--entryPoints.web.address=:8000",
		"--entryPoints.traefik.address=:8080",
		"--ping=true",
		"--providers.kubernetesingress=true",
		"--providers.kubernetesingress.namespaces=" + ns,
		"--providers.kubernetesingress.disableClusterScopeResources=true",
		"--log.level=INFO",
	}
}

// startTraefik runs Traefik (built from its module by `kubecluster build`,
// imported by loadTraefikImage,
// image localhost/traefik:e2e) as the namespace's ingress controller, with
// an Ingress that sends every path to the Service named service, and
// returns Traefik's URL (its own Service's ClusterIP) once a request
// through it is answered 200 by the service's pods. Traefik routes to the
// Service's endpoints, read from its EndpointSlices: a terminating endpoint
// that still serves becomes a fenced server (new requests go to it only
// when every server is fenced), one that stops serving leaves the route.
func (e *env) startTraefik(service string) string {
	e.t.Helper()
	loadTraefikImage(e.t)
	ctx := e.t.Context()
	svc, err := e.cs.CoreV1().Services(e.ns).Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	const name = "traefik"
	labels := map[string]string{"app": name}
	read := []string{"get", "list", "watch"}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "secrets"}, Verbs: read},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: read},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses/status"}, Verbs: []string{"update"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: e.ns}}}
	replicas, grace := int32(1), int64(10)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            name,
					TerminationGracePeriodSeconds: &grace,
					EnableServiceLinks:            new(bool),
					Containers: []corev1.Container{{
						Name: name, Image: traefikImage.Name, ImagePullPolicy: corev1.PullNever,
						Args:  traefikArgs(e.ns),
						Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8000}, {Name: "ping", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ping", Port: intstr.FromString("ping")}},
							PeriodSeconds: 2, FailureThreshold: 2, TimeoutSeconds: 3},
					}},
				},
			},
		},
	}
	tsvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Selector: labels,
		Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("web")}}}}
	prefix := netv1.PathTypePrefix
	ing := &netv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: service}, Spec: netv1.IngressSpec{Rules: []netv1.IngressRule{{
		IngressRuleValue: netv1.IngressRuleValue{HTTP: &netv1.HTTPIngressRuleValue{Paths: []netv1.HTTPIngressPath{{
			Path: "/", PathType: &prefix,
			Backend: netv1.IngressBackend{Service: &netv1.IngressServiceBackend{Name: service,
				Port: netv1.ServiceBackendPort{Number: svc.Spec.Ports[0].Port}}},
		}}}},
	}}}}
	cs, opts := e.cs, metav1.CreateOptions{}
	check := func(what string, err error) {
		if err != nil {
			e.t.Fatalf("traefik's %s: %v", what, err)
		}
	}
	_, err = cs.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, opts)
	check("ServiceAccount", err)
	_, err = cs.RbacV1().Roles(e.ns).Create(ctx, role, opts)
	check("Role", err)
	_, err = cs.RbacV1().RoleBindings(e.ns).Create(ctx, binding, opts)
	check("RoleBinding", err)
	_, err = cs.CoreV1().Services(e.ns).Create(ctx, tsvc, opts)
	check("Service", err)
	_, err = cs.NetworkingV1().Ingresses(e.ns).Create(ctx, ing, opts)
	check("Ingress", err)
	_, err = cs.AppsV1().Deployments(e.ns).Create(ctx, d, opts)
	check("Deployment", err)
	start := time.Now()
	e.waitRolledOut(name, 2*time.Minute)
	url := e.serviceURL(name) // answered 200 by the service's pods through Traefik's route
	e.t.Logf("traefik routing to %s's endpoints after %.1fs", service, time.Since(start).Seconds())
	return url
}

// traefikLoad is the one import of Traefik's image into the cluster, made
// by the first test that needs it.
var traefikLoad struct {
	sync.Mutex
	done bool
	err  error
}

// loadTraefikImage imports Traefik's image (traefikImage) once. CI builds
// Traefik in the background beside the first tests (`kubecluster up
// --skip-traefik`) and sets LDTEST_KUBE_TRAEFIK_WAIT (a Go duration, such
// as 20m): then a missing binary is waited for, until it appears or its
// build leaves its error (cfg.TraefikFailed). Without it, a missing binary
// fails the test at once, naming the command that builds it.
func loadTraefikImage(t testing.TB) {
	t.Helper()
	traefikLoad.Lock()
	defer traefikLoad.Unlock()
	if !traefikLoad.done {
		traefikLoad.done = true
		traefikLoad.err = waitForTraefik(t)
		if traefikLoad.err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			traefikLoad.err = cluster.LoadImages(ctx, cfg, repo, traefikImage)
		}
	}
	if traefikLoad.err != nil {
		t.Fatalf("Traefik's image: %v", traefikLoad.err)
	}
}

func waitForTraefik(t testing.TB) error {
	v := os.Getenv("LDTEST_KUBE_TRAEFIK_WAIT")
	if v == "" {
		return nil // LoadImages names the missing binary and the command that builds it
	}
	limit, err := time.ParseDuration(v)
	if err != nil || limit <= 0 {
		return fmt.Errorf("LDTEST_KUBE_TRAEFIK_WAIT=%q: want a positive Go duration, such as 20m", v)
	}
	start := time.Now()
	for {
		if _, err := os.Stat(cfg.TraefikBin()); err == nil {
			if waited := time.Since(start); waited > time.Second {
				t.Logf("waited %.0fs for Traefik's background build", waited.Seconds())
			}
			return nil
		}
		if msg, err := os.ReadFile(cfg.TraefikFailed()); err == nil {
			return fmt.Errorf("its background build failed: %s", msg)
		}
		if time.Since(start) > limit {
			return fmt.Errorf("%s not built after %s (LDTEST_KUBE_TRAEFIK_WAIT=%s)", cfg.TraefikBin(), limit, v)
		}
		time.Sleep(2 * time.Second)
	}
}

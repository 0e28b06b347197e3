package rollout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lameduck/lameduck/cmd/lameduck/internal/ctxtime"
)

// ModeCluster is the Report's Mode of a rollout on a real cluster.
const ModeCluster = "cluster"

// restartedAtAnnotation is what `kubectl rollout restart` sets on a
// Deployment's pod template to roll every pod
// (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_rollout/kubectl_rollout_restart/).
const restartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// KubeOptions configures a rollout on a real cluster. Every field has the
// default given by the `lameduck rollout` flag of the same name.
type KubeOptions struct {
	Load

	// Kubeconfig is the kubeconfig file; "" follows kubectl's rules
	// ($KUBECONFIG, then ~/.kube/config, then the in-cluster config).
	Kubeconfig string
	// Context is the kubeconfig context; "" is its current context.
	Context string
	// Namespace is the Deployment's; "" is the context's namespace, else
	// "default".
	Namespace string
	// Deployment is the Deployment's name, bare or as deployment/NAME.
	Deployment string
	// URL is where the load goes: http(s)://HOST[:PORT], without a path
	// (GetPath and PostPath are added): a ClusterIP reached from a node,
	// a NodePort, an ingress.
	URL string

	// RolloutTimeout bounds the wait for the Deployment to be complete,
	// before the first restart and after each: its new ReplicaSet fully
	// available, every old pod gone from the API.
	RolloutTimeout time.Duration

	// Progress, when set, is called about four times a second and at each
	// step with the rounds done, the total, and the requests and failures
	// so far.
	Progress func(done, total, requests, failed int)
	// Warn receives problems that do not stop the rollout. Default: none.
	Warn func(string)

	// client replaces the kubeconfig's (tests).
	client kubernetes.Interface
	// poll is the period of the Deployment's status checks; default 250ms.
	poll time.Duration
}

// deploymentName returns NAME from NAME, deployment/NAME,
// deployments/NAME, deploy/NAME or deployment.apps/NAME.
func deploymentName(s string) (string, error) {
	name := s
	if kind, n, ok := strings.Cut(s, "/"); ok {
		switch strings.ToLower(kind) {
		case "deployment", "deployments", "deploy", "deployment.apps", "deployments.apps":
			name = n
		default:
			return "", fmt.Errorf("%q: only a Deployment can be rolled out; write deployment/NAME or NAME", s)
		}
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("%q: not a Deployment name (%s); write deployment/NAME or NAME", s, strings.Join(errs, "; "))
	}
	return name, nil
}

// Validate reports the first option that cannot work, naming the flag.
func (o *KubeOptions) Validate() error {
	if _, err := deploymentName(o.Deployment); err != nil {
		return err
	}
	u, err := url.Parse(o.URL)
	switch {
	case o.URL == "":
		return errors.New("--url is required on a cluster: where to send the load, such as --url http://10.96.0.10:80 (a ClusterIP from a node, a NodePort, an ingress)")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "":
		return fmt.Errorf("--url=%q: want http://HOST[:PORT] or https://HOST[:PORT] without a path (--get and --post give the paths), such as http://10.96.0.10:80", o.URL)
	case o.Rounds < 1:
		return fmt.Errorf("--rounds=%d: must be at least 1", o.Rounds)
	case o.Rate < 1:
		return fmt.Errorf("--rate=%d: must be at least 1 request per second", o.Rate)
	case o.GetPath == "" && o.PostPath == "":
		return errors.New("--get and --post are both empty: no load to send")
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout=%s: must be positive", o.Timeout)
	case o.RolloutTimeout <= 0:
		return fmt.Errorf("--rollout-timeout=%s: must be positive, such as 5m", o.RolloutTimeout)
	case o.Warmup < 0 || o.Cooldown < 0:
		return errors.New("--warmup and --cooldown must not be negative")
	}
	return nil
}

// kubeRun is one rollout on a cluster.
type kubeRun struct {
	opt   KubeOptions
	cs    kubernetes.Interface
	ns    string
	name  string
	start time.Time
	tr    *podTracker
	info  Cluster
}

func (k *kubeRun) since() time.Duration { return time.Since(k.start) }

func (k *kubeRun) warnf(format string, args ...any) {
	if k.opt.Warn != nil {
		k.opt.Warn(fmt.Sprintf(format, args...))
	}
}

// RunKube restarts a Deployment of a real cluster opt.Rounds times, as
// `kubectl rollout restart` does, under open-loop load to opt.URL, and
// returns the report: the load's numbers (as Run's) and each pod's
// timeline as the Kubernetes API saw it, through watches of the
// Deployment's pods, the namespace's EndpointSlices and its Events.
//
// Its steps: read the Deployment (refusing a paused one, as kubectl does);
// start the watches; wait until the Deployment is complete (its newest
// ReplicaSet fully available, no other pod left); check that opt.URL
// answers; start the load; after opt.Warmup, each round: set the pod
// template's kubectl.kubernetes.io/restartedAt annotation to now (a
// strategic merge patch) and wait until the rollout is complete again,
// within opt.RolloutTimeout; then opt.Cooldown, and stop the load.
//
// It returns an error wrapping ErrSetup when the cluster cannot be
// reached, the Deployment is missing or paused, the URL does not answer,
// or a rollout is not complete within opt.RolloutTimeout (the report is
// then nil), and ctx's error if ctx ended first. Failed requests are not an
// error: they are in the report. It changes nothing in the cluster but the
// annotation (which rolls the pods); every goroutine it started has ended
// when it returns.
func RunKube(ctx context.Context, opt KubeOptions) (*Report, error) {
	if err := opt.Validate(); err != nil {
		return nil, setupError(ctx, err)
	}
	if opt.poll <= 0 {
		opt.poll = 250 * time.Millisecond
	}
	k := &kubeRun{opt: opt, start: time.Now(), cs: opt.client}
	k.name, _ = deploymentName(opt.Deployment)
	k.info = Cluster{Deployment: k.name, URL: strings.TrimSuffix(opt.URL, "/"), Context: "-", Server: "-"}
	if err := k.connect(); err != nil {
		return nil, setupError(ctx, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	dep, err := k.cs.AppsV1().Deployments(k.ns).Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("deployment/%s not found in namespace %s (see kubectl get deployments -n %s; --namespace chooses another)", k.name, k.ns, k.ns)
		} else {
			err = fmt.Errorf("reading deployment/%s in namespace %s: %w", k.name, k.ns, err)
		}
		return nil, setupError(ctx, err)
	}
	if dep.Spec.Paused {
		return nil, setupError(ctx, fmt.Errorf("deployment/%s is paused: a restart would not roll it (kubectl rollout resume deployment/%s -n %s)", k.name, k.name, k.ns))
	}
	if dep.Spec.Replicas != nil && *dep.Spec.Replicas == 0 {
		return nil, setupError(ctx, fmt.Errorf("deployment/%s has 0 replicas: nothing serves, nothing to restart", k.name))
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return nil, setupError(ctx, fmt.Errorf("deployment/%s: its selector: %w", k.name, err))
	}
	k.describe(dep)
	if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		k.warnf("deployment/%s uses the Recreate strategy: every pod stops before any new one starts, so requests will fail whatever the server does", k.name)
	}
	k.tr = newPodTracker(k.start, time.Now, func(p *corev1.Pod) bool { return sel.Matches(labels.Set(p.Labels)) })

	// Permissions first: an informer that may not list retries for ever,
	// in silence.
	if err := k.canList(ctx, sel.String()); err != nil {
		return nil, setupError(ctx, err)
	}
	stopWatches := k.watch(ctx, sel.String())
	defer stopWatches()

	revision, err := k.waitComplete(ctx, dep.Generation, "")
	if err != nil {
		return nil, setupError(ctx, fmt.Errorf("before the first restart: %w", err))
	}
	if err := k.checkURL(ctx); err != nil {
		return nil, setupError(ctx, err)
	}

	rec := &recorder{since: k.since, next: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 10000, DisableCompression: true}}
	defer rec.next.(*http.Transport).CloseIdleConnections()
	client := &http.Client{Transport: rec, Timeout: opt.Timeout}
	var done atomic.Int64
	ld := startLoad(&wg, rec, client, targeter(k.info.URL, opt.GetPath, opt.PostPath), opt.Rate, k.since,
		func(n, failed int) {
			if opt.Progress != nil {
				opt.Progress(int(done.Load()), opt.Rounds, n, failed)
			}
		})
	defer ld.stop()

	if err := ctxtime.Sleep(ctx, opt.Warmup); err != nil {
		return nil, err
	}
	for round := 1; round <= opt.Rounds; round++ {
		rr, gen, err := k.restart(ctx, round)
		if err != nil {
			return nil, setupError(ctx, err)
		}
		rev, err := k.waitComplete(ctx, gen, revision)
		if err != nil {
			return nil, setupError(ctx, fmt.Errorf("round %d: %w", round, err))
		}
		rr.Complete, rr.Revision, revision = secs(k.since()), rev, rev
		k.info.RoundReports = append(k.info.RoundReports, rr)
		done.Add(1)
		ld.progress()
	}
	if err := ctxtime.Sleep(ctx, opt.Cooldown); err != nil {
		return nil, err
	}
	samples, metrics, loadStart, loadEnd := ld.stop()
	stopWatches()

	rep, _ := loadReport(samples, metrics, loadStart, loadEnd)
	rep.Command, rep.Mode, rep.Rounds, rep.Rate = []string{"deployment/" + k.name}, ModeCluster, opt.Rounds, opt.Rate
	rep.Replicas = int(ptrOr(dep.Spec.Replicas, 1))
	rep.Pods = k.tr.podReports()
	for _, p := range rep.Pods {
		if p.Killed {
			k.info.KilledPods++
		}
		if p.OOMKilled {
			k.info.OOMKilledPods++
		}
	}
	info := k.info
	rep.Cluster = &info
	return rep, nil
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// connect builds the client from the kubeconfig, as kubectl finds it,
// and settles the namespace.
func (k *kubeRun) connect() error {
	k.ns = k.opt.Namespace
	if k.cs != nil {
		if k.ns == "" {
			k.ns = metav1.NamespaceDefault
		}
		return nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.opt.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.opt.Context})
	where := "--kubeconfig=" + k.opt.Kubeconfig
	if k.opt.Kubeconfig == "" {
		where = "the kubeconfig ($KUBECONFIG or ~/.kube/config; --kubeconfig names another)"
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if k.ns == "" {
		if k.ns, _, err = cc.Namespace(); err != nil {
			return fmt.Errorf("%s: its namespace: %w", where, err)
		}
	}
	if raw, err := cc.RawConfig(); err == nil {
		k.info.Context = raw.CurrentContext
		if k.opt.Context != "" {
			k.info.Context = k.opt.Context
		}
	}
	k.info.Server = cfg.Host
	cfg.UserAgent = "lameduck-rollout"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	k.cs = cs
	return nil
}

// describe records the Deployment's namespace, strategy and grace period.
func (k *kubeRun) describe(dep *appsv1.Deployment) {
	k.info.Namespace = k.ns
	st := string(dep.Spec.Strategy.Type)
	if ru := dep.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxSurge != nil {
			st += " maxSurge=" + ru.MaxSurge.String()
		}
		if ru.MaxUnavailable != nil {
			st += " maxUnavailable=" + ru.MaxUnavailable.String()
		}
	}
	k.info.Strategy = st
	k.info.GraceSeconds = ptrOr(dep.Spec.Template.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)
}

// canList lists each watched kind once, so a missing permission is an
// error naming it.
func (k *kubeRun) canList(ctx context.Context, selector string) error {
	one := metav1.ListOptions{Limit: 1}
	if _, err := k.cs.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1}); err != nil {
		return fmt.Errorf("listing the pods of deployment/%s in namespace %s: %w", k.name, k.ns, err)
	}
	if _, err := k.cs.DiscoveryV1().EndpointSlices(k.ns).List(ctx, one); err != nil {
		return fmt.Errorf("listing the EndpointSlices of namespace %s: %w", k.ns, err)
	}
	if _, err := k.cs.CoreV1().Events(k.ns).List(ctx, one); err != nil {
		return fmt.Errorf("listing the Events of namespace %s: %w", k.ns, err)
	}
	if _, err := k.cs.AppsV1().ReplicaSets(k.ns).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1}); err != nil {
		return fmt.Errorf("listing the ReplicaSets of deployment/%s in namespace %s: %w", k.name, k.ns, err)
	}
	return nil
}

// watch starts the informers of the Deployment's pods, the namespace's
// EndpointSlices and its pod Events, and waits until each has listed.
// The function it returns stops them and waits for their goroutines; it
// may be called more than once.
func (k *kubeRun) watch(ctx context.Context, selector string) func() {
	stop := make(chan struct{})
	pods := informers.NewSharedInformerFactoryWithOptions(k.cs, 0, informers.WithNamespace(k.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	others := informers.NewSharedInformerFactoryWithOptions(k.cs, 0, informers.WithNamespace(k.ns))
	events := informers.NewSharedInformerFactoryWithOptions(k.cs, 0, informers.WithNamespace(k.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "involvedObject.kind=Pod" }))
	t := k.tr
	_, _ = pods.Core().V1().Pods().Informer().AddEventHandler(t.handlers(t.onPod, t.onPodGone))
	_, _ = others.Discovery().V1().EndpointSlices().Informer().AddEventHandler(t.handlers(t.onSlice, t.onSliceGone))
	_, _ = events.Core().V1().Events().Informer().AddEventHandler(t.handlers(t.onEvent, func(any) {}))
	for _, f := range []informers.SharedInformerFactory{pods, others, events} {
		f.Start(stop)
	}
	syncCtx, cancel := context.WithTimeout(ctx, k.opt.RolloutTimeout)
	defer cancel()
	for _, f := range []informers.SharedInformerFactory{pods, others, events} {
		for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
			if !ok && ctx.Err() == nil {
				k.warnf("the watch of %v in namespace %s has not listed within --rollout-timeout %s; its timeline may lack entries", typ, k.ns, k.opt.RolloutTimeout)
			}
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			for _, f := range []informers.SharedInformerFactory{pods, others, events} {
				f.Shutdown()
			}
		})
	}
}

// checkURL sends one request to the URL before the load, so that a wrong
// URL is an error that says so, not a run of failed requests.
func (k *kubeRun) checkURL(ctx context.Context) error {
	method, path := http.MethodGet, k.opt.GetPath
	if path == "" {
		method, path = http.MethodPost, k.opt.PostPath
	}
	req, err := http.NewRequestWithContext(ctx, method, k.info.URL+path, nil)
	if err != nil {
		return fmt.Errorf("--url=%q: %w", k.opt.URL, err)
	}
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: k.opt.Timeout}).Do(req)
	if err != nil {
		return fmt.Errorf("--url=%q: %s %s does not answer before the first restart: %w (a ClusterIP is reached from a node of the cluster; a NodePort or an ingress from anywhere)", k.opt.URL, method, path, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 400 {
		k.warnf("%s %s%s answers %s before the first restart: every such answer counts as a failed request", method, k.info.URL, path, resp.Status)
	}
	return nil
}

// restart sets the pod template's restartedAt annotation to now, with the
// strategic merge patch `kubectl rollout restart` sends, and returns the
// round's report so far and the Deployment's new generation.
func (k *kubeRun) restart(ctx context.Context, round int) (RoundReport, int64, error) {
	k.tr.setRound(round)
	dep, err := k.cs.AppsV1().Deployments(k.ns).Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		return RoundReport{}, 0, fmt.Errorf("round %d: reading deployment/%s: %w", round, k.name, err)
	}
	if dep.Spec.Paused {
		return RoundReport{}, 0, fmt.Errorf("round %d: deployment/%s was paused during the rollout", round, k.name)
	}
	now := time.Now()
	at := now.Format(time.RFC3339)
	if dep.Spec.Template.Annotations[restartedAtAnnotation] == at {
		// The same second as the last restart: the same template, which
		// would roll nothing.
		if err := ctxtime.Sleep(ctx, now.Truncate(time.Second).Add(time.Second).Sub(now)); err != nil {
			return RoundReport{}, 0, err
		}
		at = time.Now().Format(time.RFC3339)
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, restartedAtAnnotation, at)
	dep, err = k.cs.AppsV1().Deployments(k.ns).Patch(ctx, k.name, types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: "lameduck-rollout"})
	if err != nil {
		return RoundReport{}, 0, fmt.Errorf("round %d: restarting deployment/%s (a patch of its pod template): %w", round, k.name, err)
	}
	return RoundReport{Round: round, RestartedAt: at, Restarted: secs(k.since())}, dep.Generation, nil
}

// waitComplete waits until the Deployment's rollout of at least generation
// gen, to a revision other than before ("" for any), is complete, as
// `kubectl rollout status` decides (the controller has seen the
// generation, every replica updated and available, none of an old
// template counted), and every pod of another template has gone from the
// API. It returns the Deployment's revision, and an error when the
// Deployment exceeded its progress deadline, RolloutTimeout passed, or
// ctx ended.
func (k *kubeRun) waitComplete(ctx context.Context, gen int64, before string) (string, error) {
	deadline := time.NewTimer(k.opt.RolloutTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(k.opt.poll)
	defer tick.Stop()
	why := "not read yet"
	for {
		dep, err := k.cs.AppsV1().Deployments(k.ns).Get(ctx, k.name, metav1.GetOptions{})
		switch {
		case err != nil && ctx.Err() != nil:
			return "", ctx.Err()
		case err != nil:
			why = err.Error()
		default:
			done, w, err := rolloutStatus(dep, gen)
			if err != nil {
				return "", fmt.Errorf("deployment/%s: %w", k.name, err)
			}
			why = w
			if rev := dep.Annotations["deployment.kubernetes.io/revision"]; done && before != "" && rev == before {
				done, why = false, fmt.Sprintf("still at revision %s: the Deployment controller has not rolled the restart yet", rev)
			}
			if done {
				hash, w, err := k.newHash(ctx, dep)
				switch {
				case err != nil:
					why = err.Error()
				case hash == "":
					why = w
				default:
					if old := k.tr.aliveNotOf(hash); len(old) > 0 {
						why = fmt.Sprintf("%d old pods still in the API (%s)", len(old), strings.Join(old, ", "))
					} else {
						return dep.Annotations["deployment.kubernetes.io/revision"], nil
					}
				}
			}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return "", fmt.Errorf("deployment/%s not complete within --rollout-timeout %s: %s", k.name, k.opt.RolloutTimeout, why)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// rolloutStatus is `kubectl rollout status`'s verdict on dep for a
// rollout of at least generation gen: done, or what it waits for, or an
// error when the Deployment exceeded its progressDeadlineSeconds.
func rolloutStatus(dep *appsv1.Deployment, gen int64) (bool, string, error) {
	st := dep.Status
	if st.ObservedGeneration < max(gen, dep.Generation) {
		return false, "the Deployment controller has not seen the restart yet", nil
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, "", fmt.Errorf("exceeded its progress deadline: %s", c.Message)
		}
	}
	want := ptrOr(dep.Spec.Replicas, 1)
	switch {
	case st.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d of %d new replicas updated", st.UpdatedReplicas, want), nil
	case st.Replicas > st.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas pending termination", st.Replicas-st.UpdatedReplicas), nil
	case st.AvailableReplicas < st.UpdatedReplicas:
		return false, fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, st.UpdatedReplicas), nil
	}
	return true, "", nil
}

// newHash returns the pod-template-hash of dep's newest ReplicaSet (the
// one of its current revision), or "" and why when there is none yet.
func (k *kubeRun) newHash(ctx context.Context, dep *appsv1.Deployment) (string, string, error) {
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return "", "", err
	}
	rss, err := k.cs.AppsV1().ReplicaSets(k.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "", "", fmt.Errorf("listing the ReplicaSets of deployment/%s: %w", k.name, err)
	}
	rev := dep.Annotations["deployment.kubernetes.io/revision"]
	for _, rs := range rss.Items {
		if !metav1.IsControlledBy(&rs, dep) || rs.Annotations["deployment.kubernetes.io/revision"] != rev {
			continue
		}
		if h := rs.Labels["pod-template-hash"]; h != "" {
			return h, "", nil
		}
	}
	return "", fmt.Sprintf("no ReplicaSet of revision %q yet", rev), nil
}

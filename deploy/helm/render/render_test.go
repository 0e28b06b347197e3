package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/helm/rendered/ from the chart")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cases are the renderings kept in deploy/helm/rendered/: the chart's
// defaults, its other modes, and values that break a rule on purpose
// (`lameduck vet` must report them; cmd/lameduck's vet tests hold the rule
// ids).
var cases = []struct {
	name   string
	values string
}{
	{"default", ``},
	{"prestop-http", "preStop:\n  mode: http\n  http:\n    token: change-me-per-release\n"},
	{"idle", "shutdown:\n  drainMode: idle\n"},
	{"worker", "worker:\n  enabled: true\n"},
	{"worker-deletion-cost", "worker:\n  enabled: true\n  deletionCost: true\n"},
	{"broken-grace", "terminationGracePeriodSeconds: 20\n"},
	{"broken-prestop-sleep", "preStop:\n  mode: sleep\n  sleepSeconds: 5\n"},
	{"broken-probes", "probes:\n  readiness:\n    timeoutSeconds: 1\n"},
	{"broken-worker-grace", "worker:\n  enabled: true\n  checkpointMarginSeconds: 0\n  drainTimeoutSeconds: 3600\n"},
}

// renderFiles renders the chart with values (YAML) as the release opts
// names, and returns each template file's text, or the engine's error. It
// fails t when the chart does not load or values is not YAML.
func renderFiles(t *testing.T, values string, opts chartutil.ReleaseOptions) (map[string]string, error) {
	t.Helper()
	chart, err := loader.Load("../lameduck-demo")
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(chart, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Render(chart, top)
}

// render runs what `helm template lameduck-demo deploy/helm/lameduck-demo
// -f values.yaml` runs and returns the manifests sorted by template file,
// each preceded by its "# Source:" line.
func render(t *testing.T, values string) []byte {
	t.Helper()
	files, err := renderFiles(t, values, chartutil.ReleaseOptions{Name: "lameduck-demo", Namespace: "default", Revision: 1, IsInstall: true})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		if strings.HasSuffix(name, ".yaml") && strings.TrimSpace(files[name]) != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out bytes.Buffer
	for _, name := range names {
		out.WriteString("---\n# Source: " + name + "\n")
		out.WriteString(strings.TrimSpace(files[name]) + "\n")
	}
	return out.Bytes()
}

func TestRenderedIsCurrent(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := render(t, c.values)
			path := filepath.Join("..", "rendered", c.name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v; run: go test ./deploy/helm/render -update", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s is not what the chart renders; run: go test ./deploy/helm/render -update\n--- rendered now:\n%s", path, got)
			}
		})
	}
}

// TestNotes: the install notes show the arithmetic, and warn when an
// explicit grace period is shorter than the sum.
func TestNotes(t *testing.T) {
	for _, c := range []struct{ values, want, not string }{
		{``, "preStop 0s + window 5s + teardown 30s = 35s; terminationGracePeriodSeconds 45.", "WARNING"},
		{"terminationGracePeriodSeconds: 20\n", "WARNING: 35s does not fit terminationGracePeriodSeconds 20", ""},
	} {
		files, err := renderFiles(t, c.values, chartutil.ReleaseOptions{Name: "demo", Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		notes := files["lameduck-demo/templates/NOTES.txt"]
		if !strings.Contains(notes, c.want) || (c.not != "" && strings.Contains(notes, c.not)) {
			t.Errorf("values %q: notes\n%s\nwant %q, not %q", c.values, notes, c.want, c.not)
		}
	}
}

// TestTemplateErrors holds the chart's own refusals: a value the binary
// would refuse never renders.
func TestTemplateErrors(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{"shutdown:\n  delaySeconds: 5s\n", "shutdown.delaySeconds=5s: must be a whole number of seconds"},
		{"shutdown:\n  teardownSeconds: 0\n", "shutdown.teardownSeconds=0: must be positive"},
		{"preStop:\n  mode: http\n", "preStop.http.token is required"},
		{"preStop:\n  mode: exec\n", `preStop.mode="exec": unknown`},
		{"shutdown:\n  drainMode: fast\n", `shutdown.drainMode="fast": unknown`},
		{"worker:\n  enabled: true\n  queue: sqs\n", `worker.queue="sqs": unknown; use nats, amqp or postgres`},
	} {
		_, err := renderFiles(t, c.values, chartutil.ReleaseOptions{Name: "x", Namespace: "default"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %q: got error %v, want one containing %q", c.values, err, c.want)
		}
	}
}

// TestWorkerQueueArgs: worker.queue picks demo-worker's --queue and its
// address flag, worker.name its --name; the defaults render the NATS
// runner's arguments as before.
func TestWorkerQueueArgs(t *testing.T) {
	for _, c := range []struct {
		values string
		want   string
	}{
		{"worker:\n  enabled: true\n", "- demo-worker\n            - --nats=nats://nats:4222\n            - --log-format=json\n"},
		{"worker:\n  enabled: true\n  queue: amqp\n  amqp: amqp://u:p@mq:5672/\n  name: jobs\n",
			"- demo-worker\n            - --queue=amqp\n            - --amqp=amqp://u:p@mq:5672/\n            - --name=jobs\n            - --log-format=json\n"},
		{"worker:\n  enabled: true\n  queue: postgres\n",
			"- demo-worker\n            - --queue=postgres\n            - --postgres=postgres://postgres@postgres:5432/postgres\n            - --log-format=json\n"},
	} {
		if out := string(render(t, c.values)); !strings.Contains(out, c.want) {
			t.Errorf("values %q: the worker's args are not\n%s\nin\n%s", c.values, c.want, out)
		}
	}
}

// TestWorkerSafeToEvict: the runner's pod opts out of cluster-autoscaler's
// scale-down by default (its drain bound is longer than the autoscaler's
// 600s cap on an eviction's grace); worker.safeToEvict: null renders no
// annotation.
func TestWorkerSafeToEvict(t *testing.T) {
	const ann = "cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\"\n"
	if out := string(render(t, "worker:\n  enabled: true\n")); !strings.Contains(out, ann) {
		t.Errorf("the runner's pod template lacks %q:\n%s", ann, out)
	}
	if out := string(render(t, "worker:\n  enabled: true\n  safeToEvict: null\n")); strings.Contains(out, "safe-to-evict") {
		t.Errorf("worker.safeToEvict: null still renders the annotation:\n%s", out)
	}
}

// TestWorkerDeletionCost: worker.deletionCost passes --deletion-cost, the
// pod's name and namespace from the downward API, and a ServiceAccount
// bound to a Role with get and patch on pods, in the release's namespace
// only; without it none of them renders.
func TestWorkerDeletionCost(t *testing.T) {
	out := string(render(t, "worker:\n  enabled: true\n  deletionCost: true\n"))
	for _, w := range []string{"- --deletion-cost\n", "serviceAccountName: lameduck-demo-worker\n", "fieldPath: metadata.name",
		"fieldPath: metadata.namespace", "kind: Role\n", "verbs: [get, patch]", "kind: RoleBinding\n", "namespace: default\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("worker.deletionCost: the rendering lacks %q:\n%s", w, out)
		}
	}
	if out := string(render(t, "worker:\n  enabled: true\n")); strings.Contains(out, "deletion-cost") || strings.Contains(out, "kind: Role") {
		t.Errorf("without worker.deletionCost the rendering has its flag or Role:\n%s", out)
	}
}

package vet

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Object is one workload read from the input: its pod template and where
// it came from.
type Object struct {
	Kind, Namespace, Name string
	File                  string // as given on the command line; "-" for stdin
	Line                  int    // the line where the object begins (its first key), from 1
	Spec                  corev1.PodSpec
	// Labels and Annotations are the pod template's (a Pod's own): what a
	// PodDisruptionBudget selects, and where a service mesh or
	// cluster-autoscaler reads its settings.
	Labels, Annotations map[string]string
	// PDB is the spec of a PodDisruptionBudget (Kind
	// "PodDisruptionBudget", which has no pod spec); nil for a workload.
	PDB *policyv1.PodDisruptionBudgetSpec
	// Service is the spec of a Service (Kind "Service", which has no pod
	// spec): what it selects and its externalTrafficPolicy; nil otherwise.
	Service *corev1.ServiceSpec
	// Replicas and Strategy are a Deployment's (Replicas nil: the API's
	// default, 1), for whether the pod being stopped can be its Service's
	// last endpoint; Strategy is nil for other kinds.
	Replicas *int32
	Strategy *appsv1.DeploymentStrategy
	// spec is where the pod spec is in the file, for the lines of
	// findings; the zero place when unknown (findings then point at Line).
	// meta is the pod template's metadata (a PDB's spec); top is the
	// object's own spec (a Deployment's, where its strategy and replicas
	// are).
	spec, meta, top place
}

// Workloads counts the objects of objs that hold a pod template: every
// one but the PodDisruptionBudgets.
func Workloads(objs []Object) int {
	n := 0
	for _, o := range objs {
		if o.workload() {
			n++
		}
	}
	return n
}

// workload reports whether o holds a pod template (not a
// PodDisruptionBudget nor a Service).
func (o *Object) workload() bool { return o.PDB == nil && o.Service == nil }

// Ref names the object as kubectl does: Kind/name, with the namespace when
// it has one.
func (o *Object) Ref() string {
	if o.Namespace != "" {
		return o.Kind + "/" + o.Namespace + "/" + o.Name
	}
	return o.Kind + "/" + o.Name
}

// document is one YAML document of a file.
type document struct {
	file string
	line int
	data []byte
}

// docSeparator is a YAML document marker line ("---", maybe with a comment).
var docSeparator = regexp.MustCompile(`^---\s*(#.*)?$`)

// splitDocuments splits a multi-document YAML stream, keeping each
// document's first line.
func splitDocuments(file string, r io.Reader) ([]document, error) {
	var docs []document
	var cur bytes.Buffer
	start, n := 1, 0
	flush := func() {
		if strings.TrimSpace(stripComments(cur.String())) != "" {
			docs = append(docs, document{file: file, line: start, data: bytes.Clone(cur.Bytes())})
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		n++
		line := sc.Text()
		if docSeparator.MatchString(line) {
			flush()
			start = n + 1
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	flush()
	return docs, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// ReadInputs reads every path ("-" is stdin; a directory is walked for
// .yaml, .yml and .json files, hidden entries skipped) and returns the
// workloads in them: Deployments, StatefulSets, DaemonSets, ReplicaSets,
// Jobs, CronJobs and Pods, and the PodDisruptionBudgets that may select
// them, also inside a kind: List. Other kinds are skipped. It returns an error when a path cannot be read or a document is
// not valid YAML for its kind: the input cannot be checked.
func ReadInputs(paths []string, stdin io.Reader) (objs []Object, docs int, err error) {
	for _, p := range paths {
		var files []string
		if p == "-" {
			files = []string{"-"}
		} else {
			st, err := os.Stat(p)
			if err != nil {
				return nil, 0, err
			}
			if st.IsDir() {
				err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if path != p && strings.HasPrefix(d.Name(), ".") {
						if d.IsDir() {
							return filepath.SkipDir
						}
						return nil
					}
					if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml") || strings.HasSuffix(path, ".json")) {
						files = append(files, path)
					}
					return nil
				})
				if err != nil {
					return nil, 0, err
				}
			} else {
				files = []string{p}
			}
		}
		for _, f := range files {
			var r io.Reader = stdin
			if f != "-" {
				fh, err := os.Open(f)
				if err != nil {
					return nil, 0, err
				}
				b, err := io.ReadAll(fh)
				_ = fh.Close()
				if err != nil {
					return nil, 0, err
				}
				r = bytes.NewReader(b)
			}
			ds, err := splitDocuments(f, r)
			if err != nil {
				return nil, 0, err
			}
			for _, d := range ds {
				docs++
				var tree yaml3.Node
				// The tree only places findings; sigs.k8s.io/yaml below
				// decides what is valid, so an error here is not reported.
				_ = yaml3.Unmarshal(d.data, &tree)
				got, err := decode(d, root(&tree, d.line))
				if err != nil {
					return nil, 0, err
				}
				objs = append(objs, got...)
			}
		}
	}
	return objs, docs, nil
}

// templated decodes, by kind, the workloads that have nothing to read but
// their metadata and the pod template at spec.template.
var templated = map[string]func(into func(any) error) (metav1.ObjectMeta, corev1.PodTemplateSpec, error){
	"StatefulSet": template(func(o *appsv1.StatefulSet) (metav1.ObjectMeta, corev1.PodTemplateSpec) {
		return o.ObjectMeta, o.Spec.Template
	}),
	"DaemonSet": template(func(o *appsv1.DaemonSet) (metav1.ObjectMeta, corev1.PodTemplateSpec) {
		return o.ObjectMeta, o.Spec.Template
	}),
	"ReplicaSet": template(func(o *appsv1.ReplicaSet) (metav1.ObjectMeta, corev1.PodTemplateSpec) {
		return o.ObjectMeta, o.Spec.Template
	}),
	"Job": template(func(o *batchv1.Job) (metav1.ObjectMeta, corev1.PodTemplateSpec) { return o.ObjectMeta, o.Spec.Template }),
}

// template decodes a T with into and returns what get reads of it: its
// metadata and its pod template.
func template[T any](get func(*T) (metav1.ObjectMeta, corev1.PodTemplateSpec)) func(into func(any) error) (metav1.ObjectMeta, corev1.PodTemplateSpec, error) {
	return func(into func(any) error) (metav1.ObjectMeta, corev1.PodTemplateSpec, error) {
		var o T
		if err := into(&o); err != nil {
			return metav1.ObjectMeta{}, corev1.PodTemplateSpec{}, err
		}
		meta, tmpl := get(&o)
		return meta, tmpl, nil
	}
}

// decode reads the workloads of one document, or of one item of a List;
// at is where its object is in the file.
func decode(d document, at place) ([]Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(d.data, &tm); err != nil {
		return nil, fmt.Errorf("%s:%d: not a Kubernetes object: %w", d.file, d.line, err)
	}
	into := func(v any) error {
		if err := yaml.Unmarshal(d.data, v); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", d.file, d.line, tm.Kind, err)
		}
		return nil
	}
	line := d.line
	if at.n != nil {
		line = at.line
	}
	// obj builds the object; path leads to the pod spec, whose metadata
	// (tmeta) is its sibling.
	obj := func(meta, tmeta metav1.ObjectMeta, spec corev1.PodSpec, path ...any) []Object {
		mpath := append(slices.Clone(path[:len(path)-1]), "metadata")
		return []Object{{Kind: tm.Kind, Namespace: meta.Namespace, Name: meta.Name, File: d.file, Line: line, Spec: spec,
			Labels: tmeta.Labels, Annotations: tmeta.Annotations, spec: at.at(path...), meta: at.at(mpath...)}}
	}
	switch tm.Kind {
	case "Deployment":
		var o appsv1.Deployment
		if err := into(&o); err != nil {
			return nil, err
		}
		objs := obj(o.ObjectMeta, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec, "spec", "template", "spec")
		objs[0].Replicas, objs[0].Strategy, objs[0].top = o.Spec.Replicas, &o.Spec.Strategy, at.at("spec")
		return objs, nil
	case "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
		meta, tmpl, err := templated[tm.Kind](into)
		if err != nil {
			return nil, err
		}
		return obj(meta, tmpl.ObjectMeta, tmpl.Spec, "spec", "template", "spec"), nil
	case "CronJob":
		var o batchv1.CronJob
		if err := into(&o); err != nil {
			return nil, err
		}
		return obj(o.ObjectMeta, o.Spec.JobTemplate.Spec.Template.ObjectMeta, o.Spec.JobTemplate.Spec.Template.Spec, "spec", "jobTemplate", "spec", "template", "spec"), nil
	case "Pod":
		var o corev1.Pod
		if err := into(&o); err != nil {
			return nil, err
		}
		return obj(o.ObjectMeta, o.ObjectMeta, o.Spec, "spec"), nil
	case "PodDisruptionBudget":
		var o policyv1.PodDisruptionBudget
		if err := into(&o); err != nil {
			return nil, err
		}
		return []Object{{Kind: tm.Kind, Namespace: o.Namespace, Name: o.Name, File: d.file, Line: line, Labels: o.Labels,
			PDB: &o.Spec, spec: at.at("spec"), meta: at.at("spec")}}, nil
	case "Service":
		var o corev1.Service
		if err := into(&o); err != nil {
			return nil, err
		}
		return []Object{{Kind: tm.Kind, Namespace: o.Namespace, Name: o.Name, File: d.file, Line: line, Labels: o.Labels,
			Service: &o.Spec, spec: at.at("spec"), meta: at.at("spec"), top: at.at("spec")}}, nil
	case "List":
		var l struct {
			Items []yamlRaw `json:"items"`
		}
		if err := into(&l); err != nil {
			return nil, err
		}
		var out []Object
		for i, it := range l.Items {
			got, err := decode(document{file: d.file, line: d.line, data: it}, at.key("items").item(i))
			if err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
		return out, nil
	}
	return nil, nil
}

// yamlRaw keeps one item of a List as JSON, to decode it by its kind.
type yamlRaw []byte

func (r *yamlRaw) UnmarshalJSON(b []byte) error {
	*r = bytes.Clone(b)
	return nil
}

package vet

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// place is one node of a document's YAML tree, kept so that a finding can
// point at the line of the field it is about rather than at the document.
// The zero place stands for a field the document does not have.
type place struct {
	n    *yaml.Node // the value; nil when the field is absent
	line int        // the line of the field in the file, from 1: its key's for a mapping entry
	base int        // the file line of the document's first line, minus one: what node lines are offset by
	path string     // such as "spec.template.spec.containers[0].livenessProbe"
}

// root returns the place of a document's top node; first is the file line
// of the document's first line.
func root(doc *yaml.Node, first int) place {
	n := doc
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n == nil || n.Kind == yaml.DocumentNode {
		return place{}
	}
	return place{n: n, line: first - 1 + n.Line, base: first - 1}
}

// key returns the value of a mapping's key, at the key's line.
func (p place) key(k string) place {
	if p.n == nil || p.n.Kind != yaml.MappingNode {
		return place{}
	}
	for i := 0; i+1 < len(p.n.Content); i += 2 {
		if p.n.Content[i].Value == k {
			return place{n: p.n.Content[i+1], line: p.base + p.n.Content[i].Line, base: p.base, path: join(p.path, k)}
		}
	}
	return place{}
}

// item returns the i-th entry of a sequence.
func (p place) item(i int) place {
	if p.n == nil || p.n.Kind != yaml.SequenceNode || i < 0 || i >= len(p.n.Content) {
		return place{}
	}
	c := p.n.Content[i]
	return place{n: c, line: p.base + c.Line, base: p.base, path: p.path + "[" + strconv.Itoa(i) + "]"}
}

// named returns the last entry of a sequence of mappings whose name is
// name (a later env entry wins, as in a pod), and its index; -1 when none.
func (p place) named(name string) (place, int) {
	if p.n == nil || p.n.Kind != yaml.SequenceNode {
		return place{}, -1
	}
	for i := len(p.n.Content) - 1; i >= 0; i-- {
		if it := p.item(i); it.key("name").value() == name {
			return it, i
		}
	}
	return place{}, -1
}

func (p place) value() string {
	if p.n == nil || p.n.Kind != yaml.ScalarNode {
		return ""
	}
	return p.n.Value
}

// at walks keys (string) and sequence indexes (int) from p and returns the
// deepest place that exists: a finding about an absent field points at its
// closest parent, where the field would be written.
func (p place) at(steps ...any) place {
	cur := p
	for _, s := range steps {
		var next place
		switch s := s.(type) {
		case string:
			next = cur.key(s)
		case int:
			next = cur.item(s)
		default:
			panic(fmt.Sprintf("vet: place.at step %T", s))
		}
		if next.n == nil {
			return cur
		}
		cur = next
	}
	return cur
}

// pathOf is the field path of steps under p, whether or not they exist.
func (p place) pathOf(steps ...any) string {
	s := p.path
	for _, st := range steps {
		switch st := st.(type) {
		case string:
			s = join(s, st)
		case int:
			s += "[" + strconv.Itoa(st) + "]"
		}
	}
	return s
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

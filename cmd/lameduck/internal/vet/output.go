package vet

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// docsURL is where each rule is documented; a rule's anchor is its ID.
const docsURL = "https://github.com/lameduck/lameduck/blob/main/docs/vet.md"

// Summary is what was read and checked.
type Summary struct {
	Documents  int `json:"documents"`
	Workloads  int `json:"workloads"`
	Containers int `json:"containers"`
	Findings   int `json:"findings"`
}

// WriteText writes one block per finding, then a summary line.
func WriteText(w io.Writer, fs []Finding, s Summary) error {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%s:%d: %s container %q: %s [%s]\n    %s\n    fix: %s\n",
			f.File, f.Line, f.Object, f.Container, f.Level, f.Rule, f.Message, f.Fix)
	}
	verdict := "clean"
	if len(fs) > 0 {
		verdict = fmt.Sprintf("%d finding(s)", len(fs))
	}
	fmt.Fprintf(&b, "lameduck vet: %s in %d container(s) of %d workload(s), %d document(s) read\n",
		verdict, s.Containers, s.Workloads, s.Documents)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes {"summary": {...}, "findings": [...]}.
func WriteJSON(w io.Writer, fs []Finding, s Summary) error {
	if fs == nil {
		fs = []Finding{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"summary": s, "findings": fs})
}

// WriteSARIF writes a SARIF 2.1.0 log (https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html)
// with one run: every rule in the driver, every finding a result located
// at its document's first line, for code-scanning annotations in CI.
func WriteSARIF(w io.Writer, fs []Finding, version string) error {
	type text struct {
		Text string `json:"text"`
	}
	type rule struct {
		ID               string         `json:"id"`
		ShortDescription text           `json:"shortDescription"`
		HelpURI          string         `json:"helpUri"`
		Properties       map[string]any `json:"properties"`
		DefaultConfig    map[string]any `json:"defaultConfiguration"`
	}
	rules := make([]rule, len(Rules))
	index := map[string]int{}
	for i, r := range Rules {
		rules[i] = rule{ID: r.ID, ShortDescription: text{r.Title}, HelpURI: docsURL + "#" + r.ID,
			Properties: map[string]any{"source": r.Source}, DefaultConfig: map[string]any{"level": r.Level}}
		index[r.ID] = i
	}
	type result struct {
		RuleID    string           `json:"ruleId"`
		RuleIndex int              `json:"ruleIndex"`
		Level     string           `json:"level"`
		Message   text             `json:"message"`
		Locations []map[string]any `json:"locations"`
	}
	results := make([]result, 0, len(fs))
	for _, f := range fs {
		uri := f.File
		if uri == "-" {
			uri = "stdin"
		}
		results = append(results, result{
			RuleID: f.Rule, RuleIndex: index[f.Rule], Level: f.Level,
			Message: text{fmt.Sprintf("%s container %q: %s Fix: %s", f.Object, f.Container, f.Message, f.Fix)},
			Locations: []map[string]any{{
				"physicalLocation": map[string]any{
					"artifactLocation": map[string]any{"uri": uri},
					"region":           map[string]any{"startLine": max(f.Line, 1)},
				},
				"logicalLocations": []map[string]any{{"name": f.Container, "fullyQualifiedName": f.Object + "/" + f.Container, "kind": "object"}},
			}},
		})
	}
	log := map[string]any{
		"$schema": "https://json.schemastore.org/sarif-2.1.0.json",
		"version": "2.1.0",
		"runs": []any{map[string]any{
			"tool": map[string]any{"driver": map[string]any{
				"name": "lameduck vet", "version": version, "informationUri": docsURL, "rules": rules,
			}},
			"results": results,
		}},
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(log)
}

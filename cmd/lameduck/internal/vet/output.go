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
	Containers int `json:"containers"` // judged
	Skipped    int `json:"skipped"`    // containers of those workloads not judged
	Findings   int `json:"findings"`
}

// NothingJudged is the verdict of a run that judged no container: never
// "clean", since nothing was checked.
func (s Summary) NothingJudged() string {
	if s.Workloads == 0 {
		return fmt.Sprintf("judged no container, so nothing was checked: the %d document(s) read hold no workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob or Pod)", s.Documents)
	}
	return fmt.Sprintf("judged no container, so nothing was checked: %d container(s) of %d workload(s) skipped, %d document(s) read; name one with --container (or --runner) to judge it",
		s.Skipped, s.Workloads, s.Documents)
}

// WriteText writes one block per finding, a line per skipped container,
// then a summary line.
func WriteText(w io.Writer, fs []Finding, skipped []Skip, s Summary) error {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%s:%d: %s container %q: %s [%s]\n    %s\n    fix: %s\n",
			f.File, f.Line, f.Object, f.Container, f.Level, f.Rule, f.Message, f.Fix)
	}
	for _, k := range skipped {
		fmt.Fprintf(&b, "%s:%d: %s container %q: skipped: %s\n", k.File, k.Line, k.Object, k.Container, k.Reason)
	}
	if s.Containers == 0 {
		fmt.Fprintf(&b, "lameduck vet: %s\n", s.NothingJudged())
	} else {
		verdict := "clean"
		if len(fs) > 0 {
			verdict = fmt.Sprintf("%d finding(s)", len(fs))
		}
		skip := ""
		if s.Skipped > 0 {
			skip = fmt.Sprintf(", %d container(s) skipped", s.Skipped)
		}
		fmt.Fprintf(&b, "lameduck vet: %s in %d container(s) of %d workload(s)%s, %d document(s) read\n",
			verdict, s.Containers, s.Workloads, skip, s.Documents)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes {"summary": {...}, "findings": [...], "judged": [...],
// "skipped": [...]},
// with "verdict" in the summary: "clean", "findings" or "nothing judged".
func WriteJSON(w io.Writer, fs []Finding, judged []Judged, skipped []Skip, s Summary) error {
	if fs == nil {
		fs = []Finding{}
	}
	if judged == nil {
		judged = []Judged{}
	}
	if skipped == nil {
		skipped = []Skip{}
	}
	verdict := "clean"
	switch {
	case s.Containers == 0:
		verdict = "nothing judged"
	case len(fs) > 0:
		verdict = "findings"
	}
	sum := struct {
		Summary
		Verdict string `json:"verdict"`
	}{s, verdict}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "35s > terminationGracePeriodSeconds 20", not \u003e
	return enc.Encode(map[string]any{"summary": sum, "findings": fs, "judged": judged, "skipped": skipped})
}

// WriteSARIF writes a SARIF 2.1.0 log (https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html)
// with one run: every rule in the driver, every finding a result located
// at the line of its field with its numbers in the result's properties,
// for code-scanning annotations in CI. A run that judged no container
// says so in a tool execution notification and is not successful.
func WriteSARIF(w io.Writer, fs []Finding, s Summary, version string) error {
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
		RuleID     string           `json:"ruleId"`
		RuleIndex  int              `json:"ruleIndex"`
		Level      string           `json:"level"`
		Message    text             `json:"message"`
		Locations  []map[string]any `json:"locations"`
		Properties map[string]any   `json:"properties,omitempty"`
	}
	results := make([]result, 0, len(fs))
	for _, f := range fs {
		uri := f.File
		if uri == "-" {
			uri = "stdin"
		}
		results = append(results, result{
			RuleID: f.Rule, RuleIndex: index[f.Rule], Level: f.Level,
			Message:    text{fmt.Sprintf("%s container %q: %s Fix: %s", f.Object, f.Container, f.Message, f.Fix)},
			Properties: f.Values,
			Locations: []map[string]any{{
				"physicalLocation": map[string]any{
					"artifactLocation": map[string]any{"uri": uri},
					"region":           map[string]any{"startLine": max(f.Line, 1)},
				},
				"logicalLocations": logical(f),
			}},
		})
	}
	invocation := map[string]any{"executionSuccessful": s.Containers > 0}
	if s.Containers == 0 {
		invocation["toolExecutionNotifications"] = []any{map[string]any{"level": "error", "message": text{"lameduck vet " + s.NothingJudged()}}}
	}
	log := map[string]any{
		"$schema": "https://json.schemastore.org/sarif-2.1.0.json",
		"version": "2.1.0",
		"runs": []any{map[string]any{
			"tool": map[string]any{"driver": map[string]any{
				"name": "lameduck vet", "version": version, "informationUri": docsURL, "rules": rules,
			}},
			"invocations": []any{invocation},
			"results":     results,
		}},
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "35s > terminationGracePeriodSeconds 20", not \u003e
	return enc.Encode(log)
}

// logical names the finding's container, and its field when known.
func logical(f Finding) []map[string]any {
	out := []map[string]any{{"name": f.Container, "fullyQualifiedName": f.Object + "/" + f.Container, "kind": "object"}}
	if f.Field != "" {
		out = append(out, map[string]any{"name": f.Field, "fullyQualifiedName": f.Object + "/" + f.Field, "kind": "member"})
	}
	return out
}

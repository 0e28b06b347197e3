package ldfx_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// docs/fx.md shows, as a diff block, what an fx application that calls
// app.Run() changes to adopt lameduck, and says how many lines: both are
// the diff of internal/adopt/before and internal/adopt/after, which
// compile with the module.
func TestDocsShowTheAdoptionDiff(t *testing.T) {
	before, after := program(t, "internal/adopt/before/main.go"), program(t, "internal/adopt/after/main.go")
	diff, added, removed := lineDiff(before, after)
	page, err := os.ReadFile("../../docs/fx.md")
	if err != nil {
		t.Fatal(err)
	}
	if block := "```diff\n" + strings.Join(diff, "\n") + "\n```"; !strings.Contains(string(page), block) {
		t.Errorf("docs/fx.md does not show the diff of internal/adopt; want the block:\n%s", block)
	}
	if claim := fmt.Sprintf("%d lines added and %d removed", added, removed); !strings.Contains(string(page), claim) {
		t.Errorf("docs/fx.md does not say %q", claim)
	}
}

// program is a file's lines from "package main" on.
func program(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Split(strings.TrimRight(s[strings.Index(s, "package main"):], "\n"), "\n")
}

// lineDiff is the shortest edit from a to b by longest common subsequence:
// every line prefixed with " ", "-" or "+", as diff -u writes a hunk.
func lineDiff(a, b []string) (out []string, added, removed int) {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out = append(out, " "+a[i])
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "-"+a[i]) // removals first, as diff -u writes them
			removed, i = removed+1, i+1
		default:
			out = append(out, "+"+b[j])
			added, j = added+1, j+1
		}
	}
	return out, added, removed
}

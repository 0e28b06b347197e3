package lameduck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// internalRefs matches references a user of lameduck cannot follow: the
// project's internal specifications and design notes, and tracker issue
// numbers. A doc comment, a test message or a page cites the rule itself
// and its public source (a Kubernetes docs page, kube-apiserver's
// behaviour, an RFC) or the docs/ section that explains it instead. The
// words are split so that this file does not match itself (nor the
// repository-wide grep for them). A random number generator's starting
// value (the rollout's removal delays) is no such reference: only the specifications' own names are (a numbered one, their
// folder, or "the" one as a source).
var internalRefs = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`\bs` + `eeds?\s*#?0[0-9]{2}\b`,
	`\bs` + `eeds/`,
	`\bthe\s+s` + `eeds?\b(\s+(doc|spec|document)s?)?\s*(\(|,|\.|$|says|describes|specif)`,
	`platform` + `\s+guide`,
	`DESIGN` + `\.md`,
	`\bissue:?\s*#?[0-9]+`,
}, "|"))

// TestDocsSpeakToUsers walks every .go and .md file of the repository (all
// its modules) and fails on a reference users cannot follow.
func TestDocsSpeakToUsers(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".go" && ext != ".md" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := internalRefs.FindString(line); m != "" {
				t.Errorf("%s:%d: %q refers to something users never see; cite the rule and its public source or docs/ instead:\n\t%s",
					path, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The pattern catches the specifications' names and lets a random
// generator's starting value be.
func TestInternalRefsPattern(t *testing.T) {
	sp := "s" + "eed"
	for _, line := range []string{sp + " 004", "see " + sp + "s/004_x.txt", "as the " + sp + " says", "(" + sp + " 003)", "DESIGN" + ".md", "platform" + " guide", "is" + "sue #12"} {
		if !internalRefs.MatchString(line) {
			t.Errorf("%q is not caught", line)
		}
	}
	upper := strings.ToUpper(sp[:1]) + sp[1:]
	for _, line := range []string{upper + " uint64 `json:\"" + sp + "\"`", "rand.New(rand.NewPCG(" + sp + ", 0))", "(" + sp + " 42)", upper + " " + sp + "s the removal delays"} {
		if internalRefs.MatchString(line) {
			t.Errorf("%q is caught; a random %s is no internal reference", line, sp)
		}
	}
}

// The package overview's file map (doc.go, "# Files") names every file of
// the package: a newcomer reading go doc finds each one there.
func TestFileMapNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, files, ok := strings.Cut(string(doc), "// # Files\n")
	if !ok {
		t.Fatal(`doc.go has no "# Files" section`)
	}
	files, _, _ = strings.Cut(files, "\n//\n")
	named := map[string]bool{}
	for _, f := range regexp.MustCompile(`[a-z_]+\.go`).FindAllString(files, -1) {
		named[f] = true
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") && n != "doc.go" && !named[n] {
			t.Errorf("doc.go's file map does not name %s", n)
		}
	}
}

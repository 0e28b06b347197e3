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
// words are split so that this file does not match itself.
var internalRefs = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`s` + `eed`,
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

package lameduck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// promiseRef is a test named in docs/promises.md: `path/x_test.go:TestName`.
var promiseRef = regexp.MustCompile("`([A-Za-z0-9_./-]+_test\\.go):(Test[A-Za-z0-9_]+)`")

// TestPromisesTableNamesRealTests keeps docs/promises.md honest: every test it
// names exists in the file it names (a renamed or deleted test fails here,
// not silently in the table), and README.md and every page of docs/ has its
// own table there.
func TestPromisesTableNamesRealTests(t *testing.T) {
	table, err := os.ReadFile("docs/promises.md")
	if err != nil {
		t.Fatal(err)
	}
	refs := promiseRef.FindAllStringSubmatch(string(table), -1)
	if len(refs) < 100 {
		t.Fatalf("docs/promises.md names %d tests; the pattern `file_test.go:TestName` no longer matches its rows?", len(refs))
	}
	files := map[string]string{}
	for _, r := range refs {
		path, name := r[1], r[2]
		src, ok := files[path]
		if !ok {
			b, err := os.ReadFile(filepath.FromSlash(path))
			if err != nil {
				t.Errorf("docs/promises.md names %s:%s, but %s cannot be read: %v", path, name, path, err)
				files[path] = ""
				continue
			}
			src = string(b)
			files[path] = src
		}
		if src != "" && !strings.Contains(src, "func "+name+"(") {
			t.Errorf("docs/promises.md names %s:%s, but %s has no func %s(: rename the row with the test", path, name, path, name)
		}
	}

	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md")
	for _, p := range pages {
		p = filepath.ToSlash(p)
		if p == "docs/promises.md" {
			continue
		}
		if !strings.Contains(string(table), "\n## "+p+"\n") {
			t.Errorf("%s has no table in docs/promises.md: add a section \"## %s\" mapping its promises to the tests that hold them", p, p)
		}
	}
}

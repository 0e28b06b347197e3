package examples

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// codeBlock is a "<!-- code: PATH -->" marker, relative to docs/, followed
// by a fenced Go block.
var codeBlock = regexp.MustCompile("(?s)<!-- code: ([^ ]+) -->\n```go\n(.*?)```\n")

// The code shown in docs/frameworks.md is the examples' files, verbatim, so
// the page shows what the tests run.
func TestFrameworksPageShowsTheTestedCode(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "frameworks.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := codeBlock.FindAllSubmatch(page, -1)
	seen := map[string]bool{}
	for _, b := range blocks {
		path := string(b[1])
		seen[path] = true
		file, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(path)))
		if err != nil {
			t.Errorf("docs/frameworks.md shows %s, which cannot be read: %v", path, err)
			continue
		}
		if string(file) != string(b[2]) {
			t.Errorf("docs/frameworks.md's block for %s differs from the file; paste the file into the page again", path)
		}
	}
	for _, f := range []string{"examples/chi/main.go", "examples/echo/main.go", "examples/gin/main.go"} {
		if !seen[f] {
			t.Errorf("docs/frameworks.md does not show %s", f)
		}
	}
}

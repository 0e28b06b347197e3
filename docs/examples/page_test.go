package examples

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// The README's "Use it in a service" snippet compiles against the module as
// it is: its statements are wrapped in a main function that declares what
// the snippet takes from the reader's program (mux, db, migrate), and built
// through an overlay, so nothing is written into the repository.
func TestReadmeSnippetCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile("(?s)\n## Use it in a service\n(.*?)\n## ").FindSubmatch(readme)
	if section == nil {
		t.Fatal(`README.md has no "## Use it in a service" section`)
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```\n").FindSubmatch(section[1])
	if block == nil {
		t.Fatal(`README.md's "Use it in a service" has no Go block`)
	}
	imports := regexp.MustCompile(`(?s)^import \((.*?)\)\n`).FindSubmatch(block[1])
	if imports == nil {
		t.Fatal("the README's snippet does not open with an import block")
	}
	body := string(block[1][len(imports[0]):])
	// What the snippet takes from the surrounding program, and the
	// standard-library packages it uses without listing them.
	std := []string{"context", "database/sql", "errors", "log", "log/slog", "net/http", "os", "time"}
	src := "package main\n\nimport (\n" + string(imports[1])
	for _, p := range std {
		if !strings.Contains(string(imports[1]), `"`+p+`"`) {
			src += "\t\"" + p + "\"\n"
		}
	}
	src += ")\n\nvar (\n\t_ = errors.Join\n\t_ = log.Fatal\n\t_ = slog.New\n\t_ = os.Exit\n)\n\n" +
		"func main() {\n\tvar mux *http.ServeMux\n\tvar db *sql.DB\n" +
		"\tmigrate := func(ctx context.Context) error { return nil }\n" + body + "}\n"

	dir := t.TempDir()
	target, err := filepath.Abs(filepath.Join("internal", "readmesnippet", "main.go")) // exists only in the overlay
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{target: file}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", overlayFile, "-o", os.DevNull, "./internal/readmesnippet")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's snippet does not compile (go build: %v):\n%s\nthe program built from it:\n%s", err, out, src)
	}
}

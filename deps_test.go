package lameduck_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The core module imports only the standard library in non-test code (the
// README's promise: a user who imports lameduck pulls no driver). Held with
// `go list -deps` over every package of the module, so a new import
// anywhere in the core fails here.
func TestCoreImportsOnlyTheStandardLibrary(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var foreign []string
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/lameduck/lameduck" && !strings.HasPrefix(p, "github.com/lameduck/lameduck/") {
			foreign = append(foreign, p)
		}
	}
	if len(foreign) > 0 {
		t.Fatalf("the core module's packages import non-standard packages: %v", foreign)
	}
}

// layerRow is one row of CONTRIBUTING.md's whiteboard of layers: the
// packages a pattern names and what they may import.
type layerRow struct {
	line    int
	pattern string
	may     []string // patterns; nil with any
	any     bool
}

// layers reads the whiteboard: the table whose header is "| package | may
// import |" in CONTRIBUTING.md.
func layers(t *testing.T) []layerRow {
	t.Helper()
	b, err := os.ReadFile("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []layerRow
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		if line == "| package | may import |" {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "| ---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 2 {
			t.Fatalf("CONTRIBUTING.md:%d: a row of the layers table has %d cells, want 2: %s", i+1, len(cells), line)
		}
		r := layerRow{line: i + 1, pattern: strings.Trim(strings.TrimSpace(cells[0]), "`")}
		switch may := strings.TrimSpace(cells[1]); may {
		case "anything":
			r.any = true
		case "nothing":
		default:
			for _, m := range strings.Split(may, ",") {
				r.may = append(r.may, strings.Trim(strings.TrimSpace(m), "`"))
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("CONTRIBUTING.md has no table headed | package | may import |: the whiteboard of layers moved; update layers()")
	}
	return rows
}

// matchLayer reports whether pkg, a path relative to the repository's
// root ("" is the root package, named lameduck in the whiteboard), is one
// of pattern's packages.
func matchLayer(pattern, pkg string) bool {
	if pkg == "" {
		pkg = "lameduck"
	}
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	if pattern == "contrib/*" {
		return strings.HasPrefix(pkg, "contrib/")
	}
	return pkg == pattern
}

// integration returns a contrib package's integration ("contrib/fiber"
// for contrib/fiber/example), or "".
func integration(pkg string) string {
	parts := strings.SplitN(pkg, "/", 3)
	if len(parts) < 2 || parts[0] != "contrib" {
		return ""
	}
	return parts[0] + "/" + parts[1]
}

// TestLayers holds CONTRIBUTING.md's whiteboard of layers: every package
// of the repository (every module in go.work) imports, in non-test code,
// only the repository's packages its row allows. It reads the imports with
// go list.
func TestLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	rows := layers(t)
	dirs, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}/...").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	args := append([]string{"list", "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, strings.Fields(string(dirs))...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const root = "github.com/lameduck/lameduck"
	rel := func(p string) (string, bool) {
		if p == root {
			return "", true
		}
		r, ok := strings.CutPrefix(p, root+"/")
		return r, ok
	}
	name := func(p string) string {
		if p == "" {
			return "lameduck"
		}
		return p
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, ok := rel(f[0])
		if !ok {
			continue
		}
		n++
		var row *layerRow // the most specific: the longest pattern
		for i := range rows {
			if matchLayer(rows[i].pattern, pkg) && (row == nil || len(rows[i].pattern) > len(row.pattern)) {
				row = &rows[i]
			}
		}
		if row == nil {
			t.Errorf("CONTRIBUTING.md: the whiteboard of layers has no row for package %s: add one saying what it may import", name(pkg))
			continue
		}
		if row.any {
			continue
		}
		for _, imp := range f[1:] {
			dep, ok := rel(imp)
			if !ok {
				continue // the standard library, or a third party's (TestCoreImportsOnlyTheStandardLibrary)
			}
			if in := integration(pkg); in != "" && (dep == in || strings.HasPrefix(dep, in+"/")) {
				continue // a contrib integration's packages import each other
			}
			if !slices.ContainsFunc(row.may, func(m string) bool { return matchLayer(m, dep) }) {
				allowed := "nothing"
				if len(row.may) > 0 {
					allowed = strings.Join(row.may, ", ")
				}
				t.Errorf("CONTRIBUTING.md:%d: the whiteboard says %s may import %s; %s imports %s: remove the import, or change the row if the layers changed",
					row.line, row.pattern, allowed, name(pkg), name(dep))
			}
		}
	}
	if n == 0 {
		t.Fatal("go list named no package of the repository")
	}
}

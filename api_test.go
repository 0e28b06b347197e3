package lameduck_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// rootAPILimit is the most exported identifiers the root package may have,
// fields and methods counted: a service needs a Config, New, a Lifecycle
// and what they name; what only a tool of this repository needs lives in
// an internal package.
const rootAPILimit = 150

// rootAPI lists the root package's exported identifiers as "kind name":
// funcs, types, constants and variables, the exported fields of exported
// structs, the methods of exported interfaces, and the exported methods of
// exported types.
func rootAPI(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var api []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						api = append(api, "func "+d.Name.Name)
						continue
					}
					typ := d.Recv.List[0].Type
					if s, ok := typ.(*ast.StarExpr); ok {
						typ = s.X
					}
					if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
						api = append(api, "method "+id.Name+"."+d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							api = append(api, "type "+s.Name.Name)
							var fields []*ast.Field
							switch typ := s.Type.(type) {
							case *ast.StructType:
								fields = typ.Fields.List
							case *ast.InterfaceType:
								fields = typ.Methods.List
							}
							for _, fl := range fields {
								for _, n := range fl.Names {
									if n.IsExported() {
										api = append(api, "member "+s.Name.Name+"."+n.Name)
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									api = append(api, "value "+n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return api
}

// TestRootAPIStaysSmall: the root package exports fewer than rootAPILimit
// identifiers, and the count CHANGELOG.md's Unreleased section states is
// the count.
func TestRootAPIStaysSmall(t *testing.T) {
	api := rootAPI(t)
	if len(api) >= rootAPILimit {
		t.Errorf("the root package exports %d identifiers, fields and methods counted; keep it under %d: unexport what no service calls, or move what a tool of this repository needs to an internal package:\n%s",
			len(api), rootAPILimit, strings.Join(api, "\n"))
	}
	b, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	unreleased, _, _ := strings.Cut(string(b), "\n## [0")
	m := regexp.MustCompile(`exported identifiers, fields and methods counted,\s+down to (\d+)\)`).FindStringSubmatch(unreleased)
	if m == nil {
		t.Fatal(`CHANGELOG.md's Unreleased section no longer says "exported identifiers, fields and methods counted, down to N)": update this test`)
	}
	if n, _ := strconv.Atoi(m[1]); n != len(api) {
		t.Errorf("CHANGELOG.md says the root package exports %d identifiers; it exports %d", n, len(api))
	}
}

package lameduck_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/testsupport"
)

// The tests in this file hold the claims the docs make that code can check,
// as TestSettingsTablesMatchTheRows holds the settings tables: a link or a
// cited section that exists, a count of the API, the cost of request
// tracking, the order of the shutdown's events. Each failure names the
// file and line of the claim, what it says and what the code has.

// repoFiles returns the repository's files (every module's) whose names
// end in one of exts, skipping hidden directories.
func repoFiles(t *testing.T, exts ...string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(exts, filepath.Ext(path)) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// lineAt returns the 1-based line of offset off in text.
func lineAt(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// mdHeadings returns the headings of a Markdown file (outside fenced code
// blocks), as written, and the anchors GitHub gives them.
func mdHeadings(t *testing.T, path string) (headings, anchors map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	headings, anchors = map[string]bool{}, map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimRight(strings.TrimLeft(line, "#"), "#"))
		headings[h] = true
		headings[strings.ReplaceAll(h, "`", "")] = true
		a := slug(h)
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return headings, anchors
}

// slug is GitHub's anchor for a heading: lower case, spaces as hyphens,
// every other character that is not a letter, a digit, a hyphen or an
// underscore dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fence      = regexp.MustCompile("(?s)```.*?```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
)

// blank replaces what re matches in text with spaces, keeping offsets and
// line breaks.
func blank(re *regexp.Regexp, text string) string {
	return re.ReplaceAllStringFunc(text, func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	})
}

// Every relative link of README.md, CONTRIBUTING.md, CHANGELOG.md and the
// pages of docs/ leads to a file that exists, and every #anchor to a
// heading of its page.
func TestDocLinksResolve(t *testing.T) {
	pages, _ := filepath.Glob("*.md")
	docs, _ := filepath.Glob("docs/*.md")
	pages = append(pages, docs...)
	if len(docs) == 0 {
		t.Fatal("no docs/*.md: run the test from the repository's root")
	}
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) map[string]bool {
		if a, ok := anchorsOf[path]; ok {
			return a
		}
		_, a := mdHeadings(t, path)
		anchorsOf[path] = a
		return a
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := blank(inlineCode, blank(fence, string(b)))
		for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			link := text[m[2]:m[3]]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			at := fmt.Sprintf("%s:%d", page, lineAt(text, m[0]))
			target, anchor, _ := strings.Cut(link, "#")
			file := page
			if target != "" {
				file = filepath.Join(filepath.Dir(page), target)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: the link (%s) leads to %s; the repository has no such file: fix the link", at, link, file)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(file)[anchor] {
				t.Errorf("%s: the link (%s) names the anchor #%s; %s has no heading with that anchor: name one of its headings", at, link, anchor, file)
			}
		}
	}
}

// citation matches the way docs and doc comments cite a section: the page,
// a comma and the heading in double quotes (docs/runners.md, "The drain"),
// across a comment's line break too.
var citation = regexp.MustCompile(`([\w./-]+\.md),(?:\s|//)*"([^"\n]+(?:\n\s*(?://)?\s*[^"\n]+)?)"`)

// Every section a .go or .md file cites as (page.md, "Heading") is a
// heading of that page.
func TestCitedSectionsExist(t *testing.T) {
	headingsOf := map[string]map[string]bool{}
	n := 0
	for _, path := range repoFiles(t, ".go", ".md") {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range citation.FindAllStringSubmatchIndex(text, -1) {
			page := text[m[2]:m[3]]
			heading := strings.Join(strings.Fields(strings.ReplaceAll(text[m[4]:m[5]], "//", " ")), " ")
			file := filepath.Clean(page) // the repository's root
			if _, err := os.Stat(file); err != nil {
				file = filepath.Join(filepath.Dir(path), page) // or beside the citing file
				if _, err := os.Stat(file); err != nil {
					continue // not a page of the repository (a third party's README)
				}
			}
			hs, ok := headingsOf[file]
			if !ok {
				hs, _ = mdHeadings(t, file)
				headingsOf[file] = hs
			}
			n++
			if !hs[heading] {
				t.Errorf("%s:%d: cites %s, %q; %s has no such heading: cite one of its headings", path, lineAt(text, m[0]), page, heading, file)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no citation of a section: has the citation style changed? Update citation.")
	}
}

// apiCount matches a count of a type's fields or methods: "`Config` has 37
// fields", "`Lifecycle` 19 methods".
var apiCount = regexp.MustCompile("`(\\w+)`(?: has| with)? (\\d+) (exported )?(fields|methods)\\b")

// Every count of the root package's API that CONTRIBUTING.md, README.md,
// the pages of docs/, the Unreleased section of CHANGELOG.md or a doc
// comment of the root package states matches the type. (The released
// sections of CHANGELOG.md count the API of their release.)
func TestAPICountsMatchTheTypes(t *testing.T) {
	types := map[string]reflect.Type{
		"Config":    reflect.TypeFor[lameduck.Config](),
		"Lifecycle": reflect.TypeFor[*lameduck.Lifecycle](),
		"Events":    reflect.TypeFor[lameduck.Events](),
	}
	count := func(typ reflect.Type, what string) int {
		if what == "methods" {
			return typ.NumMethod() // exported methods only
		}
		if typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		n := 0
		for f := range typ.Fields() {
			if f.IsExported() {
				n++
			}
		}
		return n
	}
	files, _ := filepath.Glob("docs/*.md")
	goFiles, _ := filepath.Glob("*.go")
	files = append(append(files, "CONTRIBUTING.md", "README.md", "CHANGELOG.md"), goFiles...)
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if path == "CHANGELOG.md" {
			if i := strings.Index(text, "\n## [0"); i >= 0 {
				text = text[:i] // Unreleased only
			}
		}
		for _, m := range apiCount.FindAllStringSubmatch(text, -1) {
			typ, ok := types[m[1]]
			if !ok {
				continue
			}
			said, _ := strconv.Atoi(m[2])
			if got := count(typ, m[4]); got != said {
				t.Errorf("%s:%d: says %q; %s has %d exported %s: correct the count", path,
					lineAt(text, strings.Index(text, m[0])), m[0], typ, got, m[4])
			}
		}
	}
}

// trackingPath lists the functions of track.go that every request runs
// while serving: begin publishes the request's record, end takes it back
// (holdGen) and frees it. Their callees run too, except these, each off
// the per-request path as its doc says: arrival's writes and its lock
// (which arms the coarse clock's timer) happen at most once per coarse tick,
// moved and wake run from the signal on, forgetHijack once a connection
// was hijacked.
var (
	trackingPath = []string{"begin", "end"}
	offThePath   = []string{"arrival", "moved", "wake", "forgetHijack"}
)

var (
	atomicWrites = regexp.MustCompile(`(?i)\b(one|two|three|four|five|six|\d+) atomic writes?\b`)
	lockClaim    = regexp.MustCompile(`(?i)\b(?:uncontended )?lock pairs?\b|\buncontended locks?\b|\btakes? (?:a|one|two) locks?\b`)
	noLockClaim  = regexp.MustCompile(`(?i)\btakes?(?:\s|//)+no(?:\s|//)+lock\b|\batomic writes?,(?:\s|//)+no(?:\s|//)+lock\b`)
)

// The cost of request tracking the docs state (no lock, three atomic
// writes) is what track.go's begin and end do: they call no Lock, and make
// that many atomic writes (Store, CompareAndSwap, Swap, Add) between them.
func TestTrackingCostIsWhatTheDocsSay(t *testing.T) {
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	goFiles, _ := filepath.Glob("*.go")
	for _, path := range goFiles {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs[fd.Name.Name] = fd // methods of different types share no name on this path
			}
		}
	}
	var locks []string
	writes := 0
	visited := map[string]bool{}
	var walk func(name string)
	walk = func(name string) {
		fd, ok := funcs[name]
		if !ok || visited[name] || slices.Contains(offThePath, name) {
			return
		}
		visited[name] = true
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				switch fn.Sel.Name {
				case "Lock", "RLock":
					locks = append(locks, fmt.Sprintf("%s (%s)", fset.Position(call.Pos()), name))
				case "Store", "CompareAndSwap", "Swap", "Add":
					writes++
				}
				walk(fn.Sel.Name)
			case *ast.Ident:
				walk(fn.Name)
			}
			return true
		})
	}
	for _, name := range trackingPath {
		if _, ok := funcs[name]; !ok {
			t.Fatalf("track.go has no func %s: update trackingPath", name)
		}
		walk(name)
	}
	code := fmt.Sprintf("%d atomic writes and no lock", writes)
	if len(locks) > 0 {
		code = fmt.Sprintf("%d atomic writes and take %d locks (%s)", writes, len(locks), strings.Join(locks, ", "))
	}

	files, _ := filepath.Glob("docs/*.md")
	goFiles = slices.DeleteFunc(goFiles, func(p string) bool { return strings.HasSuffix(p, "_test.go") })
	files = append(append(files, "README.md", "CHANGELOG.md", "bench/README.md"), goFiles...)
	said := 0
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range atomicWrites.FindAllStringSubmatchIndex(text, -1) {
			if fixedEntry(path, text, m[0]) {
				continue
			}
			said++
			if n := number(text[m[2]:m[3]]); n != writes {
				t.Errorf("%s:%d: says %q per request; track.go's begin and end make %s", path, lineAt(text, m[0]), text[m[0]:m[1]], code)
			}
		}
		for _, m := range lockClaim.FindAllStringIndex(text, -1) {
			if len(locks) == 0 && !fixedEntry(path, text, m[0]) {
				t.Errorf("%s:%d: says %q per request; track.go's begin and end make %s", path, lineAt(text, m[0]), text[m[0]:m[1]], code)
			}
		}
		for _, m := range noLockClaim.FindAllStringIndex(text, -1) {
			if len(locks) > 0 && !fixedEntry(path, text, m[0]) {
				t.Errorf("%s:%d: says %q per request; track.go's begin and end make %s", path, lineAt(text, m[0]),
					strings.Join(strings.Fields(strings.ReplaceAll(text[m[0]:m[1]], "//", " ")), " "), code)
			}
		}
	}
	if said == 0 {
		t.Errorf("no doc states the atomic writes per request; track.go's begin and end make %s", code)
	}
}

// fixedEntry reports whether offset off of a file is in a "Fixed" section
// of CHANGELOG.md, whose entries quote the claims they corrected.
func fixedEntry(path, text string, off int) bool {
	return path == "CHANGELOG.md" && strings.HasPrefix(text[strings.LastIndex(text[:off], "\n### ")+1:], "### Fixed")
}

func number(s string) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return slices.Index([]string{"zero", "one", "two", "three", "four", "five", "six"}, strings.ToLower(s))
}

// eitherOrder matches the exception the Events doc makes to its order.
var eitherOrder = regexp.MustCompile(`but for (\w+) and (\w+):[^.]*either\s+order`)

// The events fire in the order the Events struct lists them, as its doc
// says, but for the pair it names: that pair fires in either order, and a
// run shows each order (hooks faster than the drain, then slower).
func TestEventsFireInTheDocumentedOrder(t *testing.T) {
	b, err := os.ReadFile("events.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.ReplaceAll(string(b), "\n//", "")
	var pair []string
	except := "no exception"
	if m := eitherOrder.FindStringSubmatch(doc); m != nil {
		pair = m[1:]
		except = "but for " + pair[0] + " and " + pair[1]
	}
	line := lineAt(string(b), strings.Index(string(b), "\n// Events are ")+1)

	var order []string // the fields of Events, in the order the doc lists them
	for f := range reflect.TypeFor[lameduck.Events]().Fields() {
		order = append(order, f.Name)
	}
	fieldOf := func(lc *lameduck.Lifecycle, e *lameduck.Event) string {
		v := reflect.ValueOf(lc.Events()).Elem()
		for i, name := range order {
			if v.Field(i).Interface() == e {
				return name
			}
		}
		return e.Name()
	}

	seen := map[string]bool{} // the orders the pair fired in
	for _, hooksFirst := range []bool{true, false} {
		var (
			mu    sync.Mutex
			fired []string // guarded by mu: HooksDone and HTTPDrained fire on two goroutines
		)
		synctest.Test(t, func(t *testing.T) {
			var lc *lameduck.Lifecycle
			var err error
			lc, err = lameduck.New(lameduck.Config{
				ShutdownDelay:    time.Second,
				ShutdownTeardown: 30 * time.Second,
				IgnoreSignals:    true,
				LookupEnv:        env(nil),
				Logger:           slog.New(slog.NewTextHandler(&testsupport.LogBuffer{}, nil)),
				OnTransition: func(tr lameduck.Transition) {
					if tr.Kind == lameduck.TransitionEvent {
						mu.Lock()
						fired = append(fired, fieldOf(lc, tr.Event))
						mu.Unlock()
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			hooks, drain := time.Second, 3*time.Second
			if !hooksFirst {
				hooks, drain = drain, hooks
			}
			if err := lc.AddTeardownHook("hook", func(context.Context) error { time.Sleep(hooks); return nil }); err != nil {
				t.Fatal(err)
			}
			if err := lc.AddServerFuncs(testsupport.SlowServer(drain), testsupport.NewChanListener()); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- lc.Run(context.Background()) }()
			<-lc.Events().StartupDone.Done()
			lc.BeginShutdown("test")
			if err := <-done; err != nil {
				t.Fatalf("Run = %v, want nil", err)
			}
		})
		if !slices.Equal(slices.Sorted(slices.Values(fired)), slices.Sorted(slices.Values(order))) {
			t.Fatalf("the events that fired, %v, are not the fields of Events, %v", fired, order)
		}
		for i := 1; i < len(fired); i++ {
			a, b := fired[i-1], fired[i]
			if slices.Index(order, a) < slices.Index(order, b) {
				continue
			}
			if len(pair) == 2 && slices.Contains(pair, a) && slices.Contains(pair, b) {
				seen[a+" before "+b] = true
				continue
			}
			t.Errorf("events.go:%d: the Events doc lists the events in the order they fire (%s), %s; a run (hooks first: %v) fired %s before %s: %v",
				line, strings.Join(order, ", "), except, hooksFirst, a, b, fired)
		}
		if len(pair) == 2 && slices.Index(fired, pair[0]) < slices.Index(fired, pair[1]) {
			seen[pair[0]+" before "+pair[1]] = true
		}
	}
	if len(pair) == 2 && len(seen) < 2 {
		t.Errorf("events.go:%d: the Events doc says %s and %s fire in either order; two runs (hooks faster, then slower than the drain) fired them only as %v",
			line, pair[0], pair[1], slices.Sorted(maps.Keys(seen)))
	}
}

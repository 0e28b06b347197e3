package lameduck_test

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/worker"
)

// DefaultEnvPrefix is lameduck's.
const DefaultEnvPrefix = lameduck.DefaultEnvPrefix

type (
	Config  = lameduck.Config
	setting = lameduck.Row
)

// runnerRows returns the rows a runner is resolved by: the core's and the
// worker package's.
func runnerRows(t *testing.T) []setting {
	t.Helper()
	res, errs := worker.Resolve(worker.Config{Lifecycle: Config{LookupEnv: func(string) (string, bool) { return "", false }}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return lameduck.Rows(&res.Config)
}

// settingsTables are the tables of README.md and docs/ that list settings:
// the first table under each heading. A complete one lists every row of
// the rows a runner is resolved by (the core's and the worker package's),
// once; the others list some of them. A runner's table gives
// a runner's defaults. The table whose docs column is set gives each
// row's doc there, word for word, one setting per row.
var settingsTables = []struct {
	file, heading    string
	complete, runner bool
	docs             string // the header of the column that is each row's doc
}{
	{"README.md", "## Configuration", true, false, "meaning"},
	{"docs/probes-and-shutdown.md", "## Configuration", true, false, ""},
	{"docs/runners.md", "## Configuration", false, true, ""},
}

// Every settings table of the docs lists exactly the settings of the
// tables the resolvers walk (the core's settingTable and the rows the
// worker package adds for a runner), each once, and every default it
// gives as a value agrees with the one the resolver chooses. A default
// cell is read as: one side, the same inside Kubernetes and elsewhere, or
// two, "Kubernetes / elsewhere"; a side is a value in backticks (read by
// the row's own parser, so `2m` and `60s` are durations), one per name
// of the row, or "unset", "no cap" or "no bound" (the zero value), or
// words (a rule, not checked here: config_test.go's TestConfigDefaults
// holds the rules); "(`v` for a runner)" gives a runner's default; other
// asides in parentheses are not read. In README.md, each row's meaning is
// its row's doc (setting.doc), so the table and the code say one thing.
func TestSettingsTablesMatchTheRows(t *testing.T) {
	all := runnerRows(t)
	rows := map[string]setting{}
	for _, s := range all {
		rows[s.Name] = s
	}
	resolved := func(kubernetes, runner bool) Config {
		t.Helper()
		c := Config{LookupEnv: func(k string) (string, bool) {
			if kubernetes && k == "KUBERNETES_SERVICE_HOST" {
				return "10.0.0.1", true
			}
			return "", false
		}}
		var errs []error
		if runner {
			var res worker.Resolved
			res, errs = worker.Resolve(worker.Config{Lifecycle: c})
			c = res.Config
		} else {
			var res lameduck.Resolved
			res, errs = lameduck.Resolve(c)
			c = res.Config
		}
		if len(errs) > 0 {
			t.Fatalf("the defaults are refused: %v", errs)
		}
		return c
	}
	type where struct {
		name string
		c    Config
	}
	server := []where{{"in Kubernetes", resolved(true, false)}, {"elsewhere", resolved(false, false)}}
	runner := []where{{"for a runner in Kubernetes", resolved(true, true)}, {"for a runner elsewhere", resolved(false, true)}}

	checked := map[string]bool{} // file:line of each table's first row
	for _, tab := range settingsTables {
		b, err := os.ReadFile(tab.file)
		if err != nil {
			t.Fatal(err)
		}
		start, table := tableUnder(string(b), tab.heading)
		if table == nil {
			t.Errorf("%s: no table under %q: fix settingsTables (settings_tables_test.go) or the page", tab.file, tab.heading)
			continue
		}
		checked[fmt.Sprintf("%s:%d", tab.file, start)] = true
		col := slices.IndexFunc(table[0], func(h string) bool { return strings.Contains(h, "default") })
		if col < 0 {
			t.Errorf("%s:%d: the settings table has no default column (a header with \"default\"): %q", tab.file, start, table[0])
			continue
		}
		docCol := -1
		if tab.docs != "" {
			if docCol = slices.Index(table[0], tab.docs); docCol < 0 {
				t.Errorf("%s:%d: the settings table has no %q column, which gives each row's doc: %q", tab.file, start, tab.docs, table[0])
			}
		}
		listed := map[string]int{} // name → line
		for i, row := range table[2:] {
			line := start + 2 + i
			names := settingNames.FindAllStringSubmatch(row[0], -1)
			if len(names) == 0 || col >= len(row) {
				t.Errorf("%s:%d: a settings table's row names no LAMEDUCK_ variable or has no default: %q", tab.file, line, row)
				continue
			}
			var ss []setting
			for _, m := range names {
				s, ok := rows[m[1]]
				switch {
				case !ok:
					t.Errorf("%s:%d lists %s, which is not a setting (settings.go, settingTable; worker/settings.go): remove the row, or fix the name", tab.file, line, m[0])
					continue
				case listed[s.Name] != 0:
					t.Errorf("%s:%d lists %s again (first on line %d): keep one row", tab.file, line, m[0], listed[s.Name])
				}
				listed[s.Name] = line
				ss = append(ss, s)
			}
			if len(ss) < len(names) {
				continue
			}
			if docCol >= 0 {
				switch {
				case len(ss) > 1:
					t.Errorf("%s:%d: %s: a row names %d settings; give each its own row, with its doc", tab.file, line, row[0], len(ss))
				case docCol >= len(row) || row[docCol] != ss[0].Doc:
					t.Errorf("%s:%d: %s: the %s column says\n\t%s\nbut the row's doc (settings.go, settingTable; worker/settings.go) says\n\t%s\nmake them one text",
						tab.file, line, row[0], tab.docs, row[min(docCol, len(row)-1)], ss[0].Doc)
				}
			}
			sides, forRunner := defaultSides(row[col])
			var problems []string // each once, though a side is checked in two places
			check := func(side string, in where) {
				if why := defaultDisagrees(ss, side, in.c); why != "" && !slices.Contains(problems, why) {
					problems = append(problems, why)
					t.Errorf("%s:%d: %s: the table's default %s (%s), %s; write the default the resolver chooses, or change the rule in resolve",
						tab.file, line, row[0], side, in.name, why)
				}
			}
			ctx := server
			if tab.runner {
				ctx = runner
			}
			switch len(sides) {
			case 1:
				check(sides[0], ctx[0])
				check(sides[0], ctx[1])
			case 2:
				check(sides[0], ctx[0])
				check(sides[1], ctx[1])
			default:
				t.Errorf("%s:%d: the default %q has %d sides; write one, or two as \"Kubernetes / elsewhere\"", tab.file, line, row[col], len(sides))
			}
			if forRunner != "" {
				check(forRunner, runner[0])
				check(forRunner, runner[1])
			}
		}
		if tab.complete {
			for _, s := range all {
				if listed[s.Name] == 0 {
					t.Errorf("%s: the table under %q does not list %s%s (Config.%s): add its row", tab.file, tab.heading, DefaultEnvPrefix, s.Name, s.Field)
				}
			}
		}
	}

	// Every other table whose rows all name settings is checked too: a new
	// settings table cannot drift unseen.
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	only := regexp.MustCompile("^`" + DefaultEnvPrefix + "[A-Z0-9_]+`(, `" + DefaultEnvPrefix + "[A-Z0-9_]+`)*$")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for start, table := range tables(string(b)) {
			if len(table) < 3 || slices.ContainsFunc(table[2:], func(r []string) bool { return !only.MatchString(r[0]) }) {
				continue
			}
			if !checked[fmt.Sprintf("%s:%d", f, start)] {
				t.Errorf("%s:%d: a table of settings that TestSettingsTablesMatchTheRows does not check: add it to settingsTables (settings_tables_test.go)", f, start)
			}
		}
	}
	if len(checked) != len(settingsTables) {
		t.Errorf("checked %d tables, want %d", len(checked), len(settingsTables))
	}
}

// settingNames finds the variables a cell names.
var settingNames = regexp.MustCompile("`" + DefaultEnvPrefix + "([A-Z0-9_]+)`")

// defaultSides returns a default cell's sides (one, or "Kubernetes /
// elsewhere") with the asides in parentheses removed, and the runner's
// value from a "(`v` for a runner)" aside.
func defaultSides(cell string) (sides []string, runner string) {
	if m := regexp.MustCompile("\\(`([^`]*)` for a runner\\)").FindStringSubmatch(cell); m != nil {
		runner = "`" + m[1] + "`"
	}
	aside := regexp.MustCompile(`\s*\([^()]*\)`)
	for {
		next := aside.ReplaceAllString(cell, "")
		if next == cell {
			break
		}
		cell = next
	}
	for _, s := range strings.Split(cell, " / ") {
		sides = append(sides, strings.TrimSpace(s))
	}
	return sides, runner
}

// defaultDisagrees returns how side, a default cell's side for the rows
// ss, disagrees with c, the resolved configuration, or "". A value is read
// by the row's own parser into a copy of c and shown as the row shows it.
func defaultDisagrees(ss []setting, side string, c Config) string {
	switch {
	case side == "unset" || side == "no cap" || side == "no bound":
		for _, s := range ss {
			if !s.Unset(&c) {
				return fmt.Sprintf("but %s defaults to %s", s.Name, shown(s, &c))
			}
		}
		return ""
	case !strings.HasPrefix(side, "`"):
		return "" // a rule in words
	}
	var values []string
	for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(side, -1) {
		values = append(values, m[1])
	}
	if len(values) != len(ss) {
		return fmt.Sprintf("gives %d values for %d settings; give one per setting, in the row's order", len(values), len(ss))
	}
	for i, s := range ss {
		want := s.Show(&c) // before Load: a runner's row keeps its value outside the Config
		doc := c
		if why := s.Load(&doc, values[i]); why != "" {
			return fmt.Sprintf("`%s` is not a value %s accepts (%s); write it as the setting is set, such as %s", values[i], s.Name, why, s.Form)
		}
		got := s.Show(&doc)
		if g, err := strconv.ParseFloat(got, 64); err == nil && strings.Contains(values[i], ".") {
			// A fraction is written rounded: 0.67 for ⅔.
			w, _ := strconv.ParseFloat(want, 64)
			_, frac, _ := strings.Cut(values[i], ".")
			if math.Abs(g-w) <= 0.5*math.Pow(10, -float64(len(frac)))+1e-12 {
				continue
			}
		} else if got == want {
			continue
		}
		which := ""
		if len(ss) > 1 {
			which = "`" + values[i] + "`: "
		}
		return fmt.Sprintf("%sbut %s defaults to %s", which, s.Name, shown(s, &c))
	}
	return ""
}

// shown is s.Show, with the zero window named as the docs write it.
func shown(s setting, c *Config) string {
	if s.Field == "ShutdownDelay" && c.ShutdownDelay == lameduck.NoDelay {
		return "0s (NoDelay)"
	}
	return s.Show(c)
}

// tables returns the Markdown tables of text by the line of their header
// (1-based), each row split into trimmed cells.
func tables(text string) map[int][][]string {
	out := map[int][][]string{}
	start := 0
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			start = 0
			continue
		}
		if start == 0 {
			start = i + 1
		}
		out[start] = append(out[start], cells(line))
	}
	return out
}

// tableUnder returns the first table under heading, before the next
// heading of any level, and the line of its header.
func tableUnder(text, heading string) (int, [][]string) {
	lines := strings.Split(text, "\n")
	at := slices.Index(lines, heading)
	if at < 0 {
		return 0, nil
	}
	all := tables(text)
	for i := at + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "#") {
			return 0, nil
		}
		if t, ok := all[i+1]; ok {
			return i + 1, t
		}
	}
	return 0, nil
}

// cells splits a table row at its unescaped pipes (GitHub's tables need a
// pipe inside a cell, even in code, escaped).
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var out []string
	cur := strings.Builder{}
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// Every LAMEDUCK_ name the repository mentions — in code, tests, docs and
// CI — is a setting: with the strict default prefix, any other would make
// the binary refuse to start (a test database's address under that prefix,
// exported in a shell that then runs the demo, say).
// The project's own test variables use LDTEST_.
func TestTheRepositoryNamesOnlyRealSettings(t *testing.T) {
	known := map[string]bool{}
	for _, s := range runnerRows(t) { // a server's rows and a runner's
		known[DefaultEnvPrefix+s.Name] = true
	}
	// Misspellings that tests and docs show being refused.
	typos := map[string]bool{"LAMEDUCK_SHUTDOWN_DELAYS": true, "LAMEDUCK_PROBE_PORT": true, "LAMEDUCK_DEMO_PORT_99999_TCP": true}
	name := regexp.MustCompile(`LAMEDUCK_[A-Z][A-Z0-9_]*[A-Z0-9]`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != "." && d.Name() != ".ci" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".tpl", ".sh", "":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllString(string(b), -1) {
			// The kubelet's service-link variables for a Service named
			// lameduck-* are let through by name shape and value
			// (servicelinks.go); docs and tests show them.
			if !known[m] && !typos[m] && !lameduck.IsServiceLinkShape(m) {
				t.Errorf("%s mentions %s, which is not a lameduck setting: the binary refuses to start with it set; "+
					"rename it (test variables: LDTEST_…) or add the setting's row", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

package sourcetest

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"
)

// goroutine is one goroutine's stack, as runtime.Stack prints it.
type goroutine struct {
	id    string // its number, never reused while the process runs
	key   string // its functions, top to bottom, and its creator: what two of the same code share
	stack string // as printed, for the report
}

// goroutines returns every goroutine's stack but the caller's.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	blocks := strings.Split(string(buf), "\n\n")
	gs := make([]goroutine, 0, len(blocks))
	for i, b := range blocks {
		if i == 0 {
			continue // the caller's own
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(b, "goroutine "), " ")
		gs = append(gs, goroutine{id: id, key: stackKey(b), stack: b})
	}
	return gs
}

// stackKey is a stack's functions without arguments, offsets or ids.
func stackKey(stack string) string {
	lines := strings.Split(stack, "\n")
	var fns []string
	for _, l := range lines[1:] { // the first is "goroutine N [state]:"
		if strings.HasPrefix(l, "\t") || l == "" {
			continue // a file:line
		}
		if i := strings.Index(l, " in goroutine "); i >= 0 {
			l = l[:i]
		}
		if strings.HasSuffix(l, ")") {
			if i := strings.LastIndex(l, "("); i > 0 {
				l = l[:i]
			}
		}
		fns = append(fns, l)
	}
	return strings.Join(fns, "|")
}

// leaks compares the goroutines now with before, waiting up to 5s for the
// ones that are ending, and for the relay to carry no connection: the
// Sources' close funcs must leave neither behind. It returns "" or what
// was left, with a stack of each kind.
func (sc *scene) leaks(before []goroutine) string {
	var left []goroutine
	conns := 0
	deadline := time.Now().Add(5 * time.Second)
	for {
		left = newGoroutines(before, goroutines(), sc.h.IgnoreGoroutines)
		conns = sc.relay.Conns()
		if (len(left) == 0 && conns == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var b strings.Builder
	if conns > 0 {
		fmt.Fprintf(&b, "%d connection(s) through the relay still open 5s after every runner stopped and every Source was closed", conns)
	}
	if len(left) > 0 {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		kinds := map[string][]goroutine{}
		for _, g := range left {
			kinds[g.key] = append(kinds[g.key], g)
		}
		keys := make([]string, 0, len(kinds))
		for k := range kinds {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%d goroutine(s) left 5s after every runner stopped and every Source was closed:", len(left))
		for _, k := range keys {
			fmt.Fprintf(&b, "\n--- %d of:\n%s", len(kinds[k]), firstLines(kinds[k][0].stack, 24))
		}
	}
	return b.String()
}

// ownKinds are the suite's own goroutines that may outlive a scenario's
// check: the relay's, which Close joins after it.
var ownKinds = []string{"sourcetest.(*Relay)."}

// newGoroutines returns the goroutines of after that were not running
// before (by number: a goroutine's state may change meanwhile), ignoring
// the relay's and those whose stack names any of ignore.
func newGoroutines(before, after []goroutine, ignore []string) []goroutine {
	had := map[string]bool{}
	for _, g := range before {
		had[g.id] = true
	}
	var out []goroutine
	for _, g := range after {
		if had[g.id] {
			continue
		}
		if names(g.key, ownKinds) || names(g.key, ignore) {
			continue
		}
		out = append(out, g)
	}
	return out
}

// names reports whether key names any of subs.
func names(key string, subs []string) bool {
	for _, s := range subs {
		if s != "" && strings.Contains(key, s) {
			return true
		}
	}
	return false
}

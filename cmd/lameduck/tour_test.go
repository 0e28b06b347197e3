package main

// The README's tour, run as written against the real binary, so that the
// tour cannot drift from what the command does.
//
// The section "A one-minute tour" of README.md is read block by block:
//
//   - a line of a ```sh block that runs `go run ./cmd/lameduck demo ...` is
//     started here instead, as the built binary, with the same variables and
//     flags plus --addr 127.0.0.1:0; the address it logs replaces
//     localhost:8080 in the lines that follow;
//   - every other line runs in one bash process (background jobs and `wait`
//     keep their meaning); a comment's status code and JSON (with "..." as a
//     wildcard) are what its output must show, and a line whose output does
//     not show it yet is run again for a few seconds, since "at once" after a
//     signal is a matter of microseconds, not a promise about a scheduler;
//   - a plain ``` block of log lines (level=...) must appear, in order, in
//     the demo's log: level, msg and every key with its value, except
//     measured times (took, since_signal), which must be durations;
//   - any other plain block is the output of the preceding ?verbose command.
//
// Substitutions keep it robust on a loaded machine: the simulated boot work
// lasts tourStartup instead of 2s (and `sleep 2` after it becomes a sleep of
// the same length); the lame-duck window (LAMEDUCK_SHUTDOWN_DELAY) lasts
// tourWindow instead of 5s, so that the 3s slow request ends inside it with
// seconds to spare, as the README's teardown line (in_flight=0) says, and the
// log block's window is read as tourWindow; the line after a background
// request runs once the demo counts it in flight (its /metrics,
// lameduck_requests_in_flight); the process is signalled by its pid rather
// than pgrep (other lameduck processes may run on the machine); and every
// curl gets a timeout and, when the line does not already print one, the
// status code.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	tourStartup = "6s"             // replaces the tour's 2s of simulated boot work
	tourWindow  = "10s"            // replaces the tour's lame-duck window (5s)
	tourRetry   = 10 * time.Second // how long a line may take to show its expectation
)

// tourBlock is one fenced block of the tour: its language ("sh" or "") and
// its lines.
type tourBlock struct {
	lang  string
	lines []string
	line  int // the README line of the opening fence
}

// readTour returns the fenced blocks of README.md's "A one-minute tour".
func readTour(t *testing.T) []tourBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []tourBlock
	in, inBlock := false, false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = strings.HasPrefix(line, "## A one-minute tour")
		case !in:
		case strings.HasPrefix(line, "```") && !inBlock:
			inBlock = true
			blocks = append(blocks, tourBlock{lang: strings.TrimPrefix(line, "```"), line: i + 1})
		case strings.HasPrefix(line, "```"):
			inBlock = false
		case inBlock:
			blocks[len(blocks)-1].lines = append(blocks[len(blocks)-1].lines, line)
		}
	}
	if len(blocks) == 0 {
		t.Fatal(`README.md has no "## A one-minute tour" section with code blocks`)
	}
	return blocks
}

// splitComment splits a shell line into its command and its trailing
// comment, ignoring # inside quotes.
func splitComment(line string) (cmd, comment string) {
	var q byte
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case q != 0:
			if c == q {
				q = 0
			}
		case c == '\'' || c == '"':
			q = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
	}
	return strings.TrimSpace(line), ""
}

// expectation is what a comment promises about a line's output.
type expectation struct {
	code   string   // "503"; empty when the comment names none
	pieces []string // JSON fragments that must appear in order
}

func (e expectation) empty() bool { return e.code == "" && len(e.pieces) == 0 }

var codeRE = regexp.MustCompile(`\b[1-5][0-9][0-9]\b`)

// parseExpectation reads a comment such as `503 {"status":"starting",...}:
// boot work is still running` or `{"status":"draining",...} 503, at once`.
func parseExpectation(comment string) expectation {
	var e expectation
	rest := comment
	if i := strings.IndexByte(comment, '{'); i >= 0 {
		depth, q, end := 0, false, -1
		for j := i; j < len(comment) && end < 0; j++ {
			switch c := comment[j]; {
			case q && c == '\\':
				j++
			case c == '"':
				q = !q
			case !q && c == '{':
				depth++
			case !q && c == '}':
				depth--
				if depth == 0 {
					end = j + 1
				}
			}
		}
		if end > 0 {
			for _, p := range strings.Split(comment[i:end], "...") {
				if p != "" {
					e.pieces = append(e.pieces, p)
				}
			}
			rest = comment[:i] + " " + comment[end:]
		}
	}
	e.code = codeRE.FindString(rest)
	return e
}

// check reports what is wrong with out (the line's output, whose status code
// is found by statusOf), or "".
func (e expectation) check(out, code string) string {
	if e.code != "" && code != e.code {
		return fmt.Sprintf("status %q, want %s", code, e.code)
	}
	at := 0
	for _, p := range e.pieces {
		i := strings.Index(out[at:], p)
		if i < 0 {
			return fmt.Sprintf("no %s in the output (after byte %d)", p, at)
		}
		at += i + len(p)
	}
	return ""
}

var statusLineRE = regexp.MustCompile(`(?m)^HTTP/\S+ ([0-9]{3})`)

// statusOf finds the status code in a curl's output: its status line with
// -i, else the last word (the line's own -w, or the one added here).
func statusOf(cmd, out string) string {
	if m := statusLineRE.FindStringSubmatch(out); m != nil && strings.Contains(cmd, " -i") {
		return m[1]
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// shell is one bash process that runs the tour's lines one at a time.
type shell struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	n     int
}

func startShell(t *testing.T, dir string) *shell {
	t.Helper()
	sh := &shell{t: t}
	// stderr goes where stdout goes, so a failing line's output shows it.
	sh.cmd = exec.Command("bash", "--noprofile", "--norc", "-c", "exec 2>&1; exec bash --noprofile --norc")
	sh.cmd.Dir = dir
	sh.cmd.Env = childEnv(nil)
	var err error
	if sh.stdin, err = sh.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sh.out = bufio.NewReader(stdout)
	if err := sh.cmd.Start(); err != nil {
		t.Skipf("bash: %v", err)
	}
	t.Cleanup(func() {
		sh.stdin.Close()
		done := make(chan struct{})
		go func() { _ = sh.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(startTimeout):
			_ = sh.cmd.Process.Kill()
			<-done
		}
	})
	return sh
}

// run runs one command line and returns what it printed on stdout.
func (sh *shell) run(line string) string {
	sh.t.Helper()
	sh.n++
	marker := fmt.Sprintf("@@tour-%d@@", sh.n)
	if _, err := fmt.Fprintf(sh.stdin, "%s\nprintf '\\n%s\\n'\n", line, marker); err != nil {
		sh.t.Fatalf("bash: %v", err)
	}
	type res struct {
		out string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var b strings.Builder
		for {
			l, err := sh.out.ReadString('\n')
			if err != nil {
				ch <- res{b.String(), err}
				return
			}
			if strings.TrimSuffix(l, "\n") == marker {
				ch <- res{strings.TrimSuffix(b.String(), "\n"), nil}
				return
			}
			b.WriteString(l)
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			sh.t.Fatalf("bash ended while running %q: %v; output %q", line, r.err, r.out)
		}
		return r.out
	case <-time.After(2 * time.Minute):
		_ = sh.cmd.Process.Kill()
		r := <-ch
		sh.t.Fatalf("%q did not finish within 2m; output %q", line, r.out)
		return ""
	}
}

// logRecord is one slog text line: level, msg and the other keys.
type logRecord map[string]string

var logKVRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_.]*)=("(?:[^"\\]|\\.)*"|\S*)`)

func parseLogLine(s string) logRecord {
	rec := logRecord{}
	for _, m := range logKVRE.FindAllStringSubmatch(s, -1) {
		rec[m[1]] = m[2]
	}
	return rec
}

// measured keys carry a time the run measured; the README shows one run's.
var measured = map[string]bool{"took": true, "since_signal": true}

// matchLog reports whether got has every key of want with want's value.
func matchLog(want, got logRecord) bool {
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			return false
		}
		if measured[k] {
			if _, err := time.ParseDuration(g); err != nil {
				return false
			}
			continue
		}
		if g != v {
			return false
		}
	}
	return true
}

// TestReadmeTour runs every shell block of the README's tour against the
// built binary and checks each documented output, status code and log line.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl is not installed; the README's tour needs it")
		}
		t.Skip("curl is not installed")
	}
	blocks := readTour(t)
	sh := startShell(t, t.TempDir())

	var (
		demo     *proc             // the demo the tour started last
		addr     string            // its address
		logSubst *strings.Replacer // README values in its log as the tour set them
		verbose  string            // the output of the last ?verbose line
		bgFiles  []string
		sections int
	)
	for _, b := range blocks {
		switch {
		case b.lang == "sh":
			sections++
			for _, raw := range b.lines {
				cmd, comment := splitComment(raw)
				if cmd == "" {
					continue
				}
				if strings.Contains(cmd, "go run ./cmd/lameduck demo") {
					if demo != nil && !demo.hasExited() {
						t.Fatalf("README.md:%d: starts a demo while the previous one still runs", b.line)
					}
					demo, addr, logSubst = startTourDemo(t, cmd)
					continue
				}
				if demo == nil {
					t.Fatalf("README.md:%d: %q runs before the tour started a demo", b.line, raw)
				}
				exp := parseExpectation(comment)
				// A leading "sleep N;" waits for the simulated boot work.
				if rest, ok := strings.CutPrefix(cmd, "sleep 2;"); ok {
					sh.run("sleep " + strings.TrimSuffix(tourStartup, "s"))
					cmd = strings.TrimSpace(rest)
				}
				cmd = strings.ReplaceAll(cmd, "localhost:8080", addr)
				cmd = strings.ReplaceAll(cmd, `$(pgrep -n -x -u "$(id -u)" lameduck)`, fmt.Sprint(demo.cmd.Process.Pid))
				if strings.HasPrefix(cmd, "curl ") {
					cmd = "curl --noproxy '*' -m 30 " + strings.TrimPrefix(cmd, "curl ")
					if !strings.Contains(cmd, " -w ") && !strings.Contains(cmd, " -i ") {
						cmd = strings.Replace(cmd, "curl ", `curl -w '\n%{http_code}\n' `, 1)
					}
				}
				if bg, ok := strings.CutSuffix(cmd, "&"); ok {
					f := fmt.Sprintf("bg-%d.out", len(bgFiles))
					bgFiles = append(bgFiles, f)
					sh.run(strings.TrimSpace(bg) + " > " + f + " &")
					waitRequestsInFlight(t, demo, len(bgFiles)) // the background requests arrive before the next line
					continue
				}
				if cmd == "wait" {
					cmd = "wait; cat " + strings.Join(bgFiles, " ")
					bgFiles = nil
				}
				out := sh.run(cmd)
				for deadline := time.Now().Add(tourRetry); !exp.empty(); {
					why := exp.check(out, statusOf(cmd, out))
					if why == "" {
						break
					}
					if time.Now().After(deadline) || cmd == "wait" || strings.HasPrefix(cmd, "wait;") {
						t.Fatalf("README.md, block at line %d: %s\n\toutput: %s\n\t%s", b.line, raw, out, why)
					}
					time.Sleep(50 * time.Millisecond)
					out = sh.run(cmd)
				}
				if strings.Contains(cmd, "?verbose") {
					verbose = out
				}
				if strings.HasPrefix(cmd, "wait") && demo != nil {
					// The demo that was signalled exits 0 once its drain is over.
					if code, _ := demo.waitExit(time.Minute); code != 0 {
						t.Fatalf("README.md:%d: the demo exited %d after the drain, want 0", b.line, code)
					}
				}
			}
		case len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "level="):
			checkTourLog(t, b, demo, logSubst)
		default:
			want := strings.TrimSpace(strings.Join(b.lines, "\n"))
			got := strings.TrimSpace(verbose)
			if i := strings.LastIndexByte(got, '\n'); i >= 0 && codeRE.MatchString(got[i+1:]) {
				got = strings.TrimSpace(got[:i]) // the status code added to the line
			}
			if got != want {
				t.Fatalf("README.md:%d: the ?verbose report is\n%s\nwant\n%s", b.line, got, want)
			}
		}
	}
	if sections < 3 {
		t.Fatalf("the tour has %d shell blocks; the test expected at least 3", sections)
	}
	if demo != nil && !demo.hasExited() {
		demo.signal(syscall.SIGTERM)
		if code, _ := demo.waitExit(time.Minute); code != 0 {
			t.Fatalf("the last demo exited %d on SIGTERM, want 0", code)
		}
	}
}

// startTourDemo starts the README's `VAR=value go run ./cmd/lameduck demo
// FLAGS` as the built binary on 127.0.0.1:0 with text logs, and returns it,
// the address it listens on and what turns the README's log lines into
// this run's (its window is tourWindow).
func startTourDemo(t *testing.T, line string) (*proc, string, *strings.Replacer) {
	t.Helper()
	env := map[string]string{}
	var args []string
	var subst []string
	fields := strings.Fields(line)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.ContainsAny(f, `'"$`) {
			t.Fatalf("the tour's demo line %q needs a shell to parse; keep it to plain words", line)
		}
		if k, v, ok := strings.Cut(f, "="); ok && args == nil && !strings.HasPrefix(f, "-") {
			if k == "LAMEDUCK_SHUTDOWN_DELAY" {
				// The draining line names the window twice:
				// "waiting 5s for endpoint removal" ... window=5s.
				subst = append(subst, "waiting "+v+" ", "waiting "+tourWindow+" ", "window="+v+" ", "window="+tourWindow+" ")
				v = tourWindow
			}
			env[k] = v
			continue
		}
		if f == "go" {
			// go run ./cmd/lameduck demo
			if i+3 >= len(fields) || fields[i+1] != "run" || fields[i+3] != "demo" {
				t.Fatalf("unexpected demo line %q", line)
			}
			i += 3
			args = []string{}
			continue
		}
		if f == "2s" && len(args) > 0 && args[len(args)-1] == "--startup-delay" {
			f = tourStartup
		}
		args = append(args, f)
	}
	p := startProc(t, env, append([]string{"--log-format", "text", "--addr", "127.0.0.1:0"}, args...)...)
	l := p.waitLog(`"lameduck: listening"`, startTimeout, func(l logLine) bool {
		return strings.Contains(l.raw, `msg="lameduck: listening"`)
	})
	a := parseLogLine(l.raw)["addr"]
	if a == "" {
		t.Fatalf("listening line without addr: %s", l.raw)
	}
	p.base = "http://" + a
	return p, a, strings.NewReplacer(subst...)
}

// waitRequestsInFlight waits until the demo counts n application requests in flight
// besides the scrape that asks (lameduck_requests_in_flight counts it too).
func waitRequestsInFlight(t *testing.T, demo *proc, n int) {
	t.Helper()
	defer demo.client.CloseIdleConnections()
	for deadline := time.Now().Add(tourRetry); ; time.Sleep(pollEvery) {
		m := scrapeGauge(t, demo, "lameduck_requests_in_flight")
		if m >= float64(n+1) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo counts %v request(s) in flight %s after the background request(s) started; want %d besides the scrape",
				m-1, tourRetry, n)
		}
	}
}

// checkTourLog checks that the block's log lines appear, in order, in the
// demo's log.
func checkTourLog(t *testing.T, b tourBlock, demo *proc, subst *strings.Replacer) {
	t.Helper()
	if demo == nil {
		t.Fatalf("README.md:%d: a log block before any demo ran", b.line)
	}
	// The log block follows the drain; the demo has exited, so its log is
	// complete.
	if !demo.hasExited() {
		t.Fatalf("README.md:%d: the log block comes before the demo was stopped", b.line)
	}
	got := strings.Split(demo.output(), "\n")
	at := 0
	for _, w := range b.lines {
		if strings.TrimSpace(w) == "" {
			continue
		}
		want := parseLogLine(subst.Replace(w))
		found := false
		for ; at < len(got); at++ {
			if matchLog(want, parseLogLine(got[at])) {
				found, at = true, at+1
				break
			}
		}
		if !found {
			t.Fatalf("README.md:%d: the log line\n\t%s\n(with this run's values: %s)\nis not in the demo's log (in this order):\n%s", b.line, w, subst.Replace(w), demo.output())
		}
	}
}

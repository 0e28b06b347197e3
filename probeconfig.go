package lameduck

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Values of [Config.CheckDetails] and LAMEDUCK_CHECK_DETAILS.
const (
	// CheckDetailsAuto shows a failing check's detail on the probe-only
	// listener (Config.ProbeAddr) and hides it on a listener that also
	// serves the application. The default.
	CheckDetailsAuto = "auto"
	// CheckDetailsShow shows the (redacted) detail on every listener.
	CheckDetailsShow = "show"
	// CheckDetailsHide shows outcome words only, on every listener.
	CheckDetailsHide = "hide"
)

// hiddenValue stands for a secret in a *ConfigError: the token is never
// printed.
const hiddenValue = "(hidden)"

// secretSetting makes a row whose value is never shown, in an error or by
// a tool that lists the settings.
func secretSetting(s setting) setting {
	s.show = func(*Config) string { return hiddenValue }
	return s
}

// pathSetting is a row for one probe path: clean and absolute (badPath).
func pathSetting(name, field, def string, p func(*Config) *string) setting {
	s := stringSetting(name, field, fmt.Sprintf("a clean absolute path, such as %q", def), p)
	s.load = func(c *Config, v string) string {
		if why := badPath(v); why != "" {
			return why
		}
		*p(c) = v
		return ""
	}
	s.check = func(c *Config) string { return badPath(*p(c)) }
	return s
}

// livenessPathsSetting is the row of Config.LivenessPaths: a comma-separated
// list in the environment.
func livenessPathsSetting() setting {
	p := func(c *Config) *[]string { return &c.LivenessPaths }
	check := func(paths []string) string {
		if len(paths) == 0 {
			return "empty: the kubelet needs a liveness path"
		}
		for _, lp := range paths {
			if why := badPath(lp); why != "" {
				return strconv.Quote(lp) + ": " + why
			}
		}
		return ""
	}
	return setting{
		name: "LIVENESS_PATHS", field: "LivenessPaths",
		form:  `comma-separated clean absolute paths, such as "/healthz,/livez"`,
		unset: func(c *Config) bool { return *p(c) == nil },
		load: func(c *Config, v string) string {
			var paths []string
			for _, s := range strings.Split(v, ",") {
				paths = append(paths, strings.TrimSpace(s))
			}
			if why := check(paths); why != "" {
				return why
			}
			*p(c) = paths
			return ""
		},
		check: func(c *Config) string {
			*p(c) = slices.Clone(*p(c)) // the caller's slice is not kept
			return check(*p(c))
		},
		show:  func(c *Config) string { return fmt.Sprintf("%q", *p(c)) },
		reset: func(c *Config) { *p(c) = nil },
	}
}

// badPath says what is wrong with a probe path, or "".
func badPath(p string) string {
	switch {
	case p == "":
		return "empty"
	case p[0] != '/':
		return `it must begin with "/"`
	case p == "/":
		return `"/" would take every path of the application`
	case strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '?' || r == '#' || r == '%' || r == ',' }):
		return "it holds a space, a control character, '?', '#', '%' or ','"
	case path.Clean(p) != p:
		return `it is not clean (a trailing "/", "//", "." or "..")`
	}
	return ""
}

// readTokenFile fills PreStopToken from PreStopTokenFile, once the table
// has been read and before the defaults (the token turns the hook on).
// No error prints the token.
func (c *Config) readTokenFile(src map[string]string) []error {
	var errs []error
	tokenName := named(c, src, "PRESTOP_TOKEN")
	if f := c.PreStopTokenFile; f != "" {
		fileName := named(c, src, "PRESTOP_TOKEN_FILE")
		switch b, err := os.ReadFile(f); {
		case c.PreStopToken != "":
			errs = append(errs, &ConfigError{Setting: fileName, Value: f,
				Problem: "set together with " + named(c, src, "PRESTOP_TOKEN"), Fix: "keep one of the two"})
		case err != nil:
			errs = append(errs, &ConfigError{Setting: fileName, Value: f,
				Problem: "cannot read the preStop token: " + err.Error(), Fix: "mount the Secret there, or unset it"})
		default:
			tok := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if tok == "" {
				errs = append(errs, &ConfigError{Setting: fileName, Value: f, Problem: "the file is empty",
					Fix: "put the token in it, or unset it"})
			}
			c.PreStopToken, src["PRESTOP_TOKEN"], tokenName = tok, fileName, fileName
		}
	}
	if tok := c.PreStopToken; tok != "" && (strings.ContainsFunc(tok, func(r rune) bool { return r < 0x20 || r > 0x7e }) ||
		strings.TrimSpace(tok) != tok) {
		// An HTTP header cannot carry a control character, and its value
		// reaches the handler without surrounding spaces: such a token
		// could never match.
		errs = append(errs, &ConfigError{Setting: tokenName, Value: hiddenValue,
			Problem: "the token holds a control or non-ASCII character, or begins or ends with a space, which no HTTP header can carry",
			Fix:     "use printable ASCII without surrounding spaces"})
		c.PreStopToken = ""
		c.PreStop = false // refused: do not ask for a second fix
		src["PRESTOP"] = "refused token"
	}
	return errs
}

// checkPreStopIsGuarded refuses GET /prestop on the application's own
// listener without a token: anyone who reaches the port could drain the
// pod.
func checkPreStopIsGuarded(c *Config, src map[string]string) []error {
	return refuseUnguarded(c, src, "PRESTOP", c.PreStop,
		"GET /prestop would be served on the application's own listener, where anyone who reaches the port can drain the pod",
		"the hook's")
}

// refuseUnguarded refuses a control endpoint that is on (the setting named
// turns it on) and would be served on the application's own listener
// without a token; problem says what anyone could do with it, and the fix
// sends the token in sender's header. A token already refused asks for no
// second fix.
func refuseUnguarded(c *Config, src map[string]string, setting string, on bool, problem, sender string) []error {
	p := c.EnvPrefix
	if !on || c.PreStopToken != "" || c.ProbeAddr != "" || src["PRESTOP"] == "refused token" {
		return nil
	}
	return []error{&ConfigError{Setting: named(c, src, setting), Value: "true", Problem: problem,
		Fix: fmt.Sprintf("set %sPRESTOP_TOKEN (or %sPRESTOP_TOKEN_FILE) and send it in %s %s header, "+
			"or serve the probes on their own port with %sPROBE_ADDR (such as \":9090\")", p, p, sender, preStopTokenHeader, p)}}
}

// checkProbePaths refuses two probes on one path, and a probe under
// ReadinessPath + "/", whose sub-paths name checks.
func checkProbePaths(c *Config, src map[string]string) []error {
	var errs []error
	type probePath struct{ name, path string }
	var paths []probePath
	for _, lp := range c.LivenessPaths {
		paths = append(paths, probePath{"LIVENESS_PATHS", lp})
	}
	paths = append(paths, probePath{"READINESS_PATH", c.ReadinessPath}, probePath{"STARTUP_PATH", c.StartupPath})
	if c.PreStop {
		paths = append(paths, probePath{"PRESTOP_PATH", c.PreStopPath})
	}
	for i, n := range paths {
		why := ""
		for _, o := range paths[:i] {
			if o.path == n.path {
				why = "the same path as " + named(c, src, o.name)
			}
		}
		if n.name != "READINESS_PATH" && strings.HasPrefix(n.path, c.ReadinessPath+"/") {
			why = "under " + named(c, src, "READINESS_PATH") + "=" + c.ReadinessPath + ", whose sub-paths name checks"
		}
		if why != "" {
			errs = append(errs, &ConfigError{Setting: named(c, src, n.name), Value: n.path, Problem: why,
				Fix: "give each probe a path of its own"})
		}
	}
	return errs
}

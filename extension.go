package lameduck

import "github.com/lameduck/lameduck/internal/extend"

// This file is the core's side of Config.Extension, which package worker
// sets (internal/extend says what each of its fields does): the reads of
// the Extension that the resolution and the Lifecycle make, so a Config
// whose Extension is nil, a server's, behaves as if none existed.

// windowName is the name the extension gives the window in the budget's
// sum ("runner drain bound"), or "": a name means the extension holds the
// window open with waits bounded by DrainTimeout (a runner's drain).
func (c *Config) windowName() string {
	if c.Extension == nil {
		return ""
	}
	return c.Extension.Window
}

// extensionDefault returns the extension's default rule for the row named
// name, or nil: the rows whose defaults an extension may replace are the
// fields of extend.Defaults.
func (c *Config) extensionDefault(name string) func(extend.Fields) string {
	if c.Extension == nil {
		return nil
	}
	d := &c.Extension.Defaults
	switch name {
	case "PROBE_ADDR":
		return d.ProbeAddr
	case "DRAIN_MODE":
		return d.DrainMode
	case "SHUTDOWN_DELAY":
		return d.ShutdownDelay
	case "DRAIN_TIMEOUT":
		return d.DrainTimeout
	case "SHUTDOWN_TEARDOWN":
		return d.ShutdownTeardown
	}
	return nil
}

// extensionFields gives an extension's default rule the fields of c it
// reads and writes, and the resolution's sources.
func (c *Config) extensionFields(src map[string]string) extend.Fields {
	return extend.Fields{
		Env: c.Env, EnvPrefix: c.EnvPrefix, TerminationGrace: c.TerminationGrace, PreStopDelay: c.PreStopDelay,
		ProbeAddr: &c.ProbeAddr, DrainMode: &c.DrainMode,
		ShutdownDelay: &c.ShutdownDelay, DrainTimeout: &c.DrainTimeout, ShutdownTeardown: &c.ShutdownTeardown,
		Sources: src,
	}
}

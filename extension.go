package lameduck

import "github.com/lameduck/lameduck/internal/extend"

// extension is what a package of this module built on the Lifecycle
// (worker) attaches to a Config through internal/extend: its settings,
// default rules and drain modes, and the hooks the Lifecycle calls.
type extension = extend.Extension[Config, Phase]

// init lets internal/extend attach an extension to a Config: the one
// effect of initialising the package, which starts nothing and reads
// nothing.
func init() {
	extend.Register(func(c *Config, e *extension) { c.ext = e })
}

// windowName is the name the extension gives the window in the budget's
// sum ("runner drain bound"), or "": a name means the extension holds the
// window open with waits bounded by DrainTimeout (a runner's drain).
func (c *Config) windowName() string {
	if c.ext == nil {
		return ""
	}
	return c.ext.Window
}

package health

// SetTestHooks installs hooks into c's probes (test only): wait runs in each
// probe after its pings are launched and before it waits on them; returned
// runs in each ping after the check's Func returned and before the result is
// published. Either may be nil.
func SetTestHooks(c *Checker, wait, returned func()) {
	c.testHookWait, c.testHookReturned = wait, returned
}

// FromBuildInfo exposes BuildInfo's rule for a given build (test only).
var FromBuildInfo = fromBuildInfo

package lameduck

import (
	"net/http"
	"os"
)

// SetExit replaces os.Exit for tests of ExitOnSecondSignal.
func SetExit(l *Lifecycle, f func(int)) { l.exit = f }

// Signal delivers sig as Run's signal handler would.
func Signal(l *Lifecycle, sig os.Signal) { l.onSignal(sig) }

// Wrap returns what AddServer makes of a server's handler.
func Wrap(l *Lifecycle, h http.Handler) http.Handler { return l.wrap(h) }

// BackgroundCount returns how many background tasks are running and how
// many have ended.
func BackgroundCount(l *Lifecycle) (running, ended int) { return l.bg.count() }

// StartupReturnGrace is how long a startup task has to return once the
// boot's budget is spent.
const StartupReturnGrace = startupReturnGrace

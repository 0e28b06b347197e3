package lameduck

import (
	"net/http"
	"os"

	"github.com/lameduck/lameduck/internal/grace"
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

// Row is one settings row, as the tests of the docs' tables read it.
type Row struct {
	Name, Field, Form, Doc string
	s                      setting
}

// Load parses v into c's field, or returns why v is refused.
func (r Row) Load(c *Config, v string) string { return r.s.load(c, v) }

// Show formats c's value of the row.
func (r Row) Show(c *Config) string { return r.s.show(c) }

// Unset reports whether c's value of the row is its zero value.
func (r Row) Unset(c *Config) bool { return r.s.unset(c) }

// Rows returns the rows c is resolved by: the core's, with what an
// extension attached to c (a runner's) adds.
func Rows(c *Config) []Row {
	var out []Row
	for _, s := range c.rows() {
		out = append(out, Row{s.name, s.field, s.form, s.doc, s})
	}
	return out
}

// IsServiceLinkShape reports whether name has the shape of a kubelet
// service-link variable (servicelinks.go).
func IsServiceLinkShape(name string) bool { return len(serviceLinkShapes(name)) > 0 }

// Budget returns the grace-period arithmetic of a resolved configuration,
// as Run's first log line states it and lameduck vet builds it.
func Budget(r Resolved) grace.Budget { return r.Config.budget(r.Sources) }

// DefaultEnvPrefix is the prefix the resolver reads when Config.EnvPrefix
// is empty.
const DefaultEnvPrefix = defaultEnvPrefix

// ErrAlreadyRunning is what a second Run, or a registration that must come
// before Run, returns once Run has started.
var ErrAlreadyRunning = errAlreadyRunning

// PreStopTokenHeader is the header that carries Config.PreStopToken.
const PreStopTokenHeader = preStopTokenHeader

package worker_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lameduck/lameduck"
	"github.com/lameduck/lameduck/internal/extend"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/lameduck/lameduck/worker"
)

// The root refuses a runner's settings on a server as a runner's, by a
// list of their names (internal/extend.RunnerSettings): that list is
// exactly the settings worker adds, and each is refused by a server with a
// message that names package worker, not as a misspelt name.
func TestRunnerSettingsAreWorkersRows(t *testing.T) {
	env := []string{"LAMEDUCK_EPOCH=3", "LAMEDUCK_EPOCH_MISMATCH_DELAY=2m", "LAMEDUCK_FETCH_WAIT=5s"}
	var cfg lameduck.Config
	cfg.LookupEnv, cfg.Environ = testsupport.EnvList(env)
	runner, errs := worker.Resolve(worker.Config{Lifecycle: cfg})
	if len(errs) != 0 {
		t.Fatalf("a runner refused its own settings: %v", errs)
	}
	// A name of the runner's resolution is worker's own when a server does
	// not take it as one of its settings.
	var added []string
	for name := range runner.Sources {
		var sc lameduck.Config
		sc.LookupEnv, sc.Environ = testsupport.EnvList([]string{"LAMEDUCK_" + name + "=x"})
		_, errs := lameduck.Resolve(sc)
		var ce *lameduck.ConfigError
		if len(errs) == 1 && errors.As(errs[0], &ce) && ce.Setting == "LAMEDUCK_"+name &&
			(ce.Problem == "not a lameduck setting" || strings.Contains(ce.Problem, "a runner's setting")) {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	if want := slices.Sorted(slices.Values(extend.RunnerSettings())); !slices.Equal(added, want) {
		t.Fatalf("worker adds the settings %q; internal/extend.RunnerSettings lists %q", added, want)
	}
	for _, kv := range env {
		var sc lameduck.Config
		sc.LookupEnv, sc.Environ = testsupport.EnvList([]string{kv})
		_, errs := lameduck.Resolve(sc)
		var ce *lameduck.ConfigError
		if len(errs) != 1 || !errors.As(errs[0], &ce) || !strings.Contains(ce.Problem, "a runner's setting (package worker") {
			t.Errorf("a server given %s: %v; want one error naming it a runner's setting", kv, errs)
		}
	}
}

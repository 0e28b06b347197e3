package lameduck

import (
	"errors"
	"strings"
	"testing"
)

// Every refusal of every setting in the table shows the accepted form, from
// the environment and from the code alike; every duration refuses a bare
// number and says to add a unit.
func TestEveryRefusalShowsTheAcceptedForm(t *testing.T) {
	bad := map[string]string{} // a value each kind refuses
	for _, s := range settingTable() {
		var c Config
		switch {
		case s.load(&c, "maybe") == "":
			continue // free text: every value is accepted
		case strings.Contains(s.load(&c, "5"), "unit"):
			bad[s.name] = "5"
		case s.load(&c, "0.5") == "": // a fraction
			bad[s.name] = "2"
		default:
			bad[s.name] = "maybe"
		}
	}
	for _, s := range settingTable() {
		v, ok := bad[s.name]
		if !ok {
			continue
		}
		_, _, errs := Config{LookupEnv: func(k string) (string, bool) {
			if k == DefaultEnvPrefix+s.name {
				return v, true
			}
			return "", false
		}}.resolve()
		if len(errs) != 1 {
			t.Errorf("%s=%q: %d errors, want 1: %v", s.name, v, len(errs), errs)
			continue
		}
		var ce *ConfigError
		if !errors.As(errs[0], &ce) || !strings.Contains(errs[0].Error(), "set it to "+s.form) {
			t.Errorf("%s=%q: %v does not show the accepted form %s", s.name, v, errs[0], s.form)
		}
		if v == "5" && !strings.Contains(errs[0].Error(), "write 5s or 5ms") {
			t.Errorf("%s=5: %v does not say to add a unit", s.name, errs[0])
		}
	}
	if len(bad) < 12 {
		t.Fatalf("only %d settings refuse anything: %v", len(bad), bad)
	}
}

// Choices accept any case, as booleans do, from the environment and the
// code, and are stored in lower case.
func TestChoicesAcceptAnyCase(t *testing.T) {
	env := map[string]string{"LAMEDUCK_ENV": "KuBeRnEtEs", "LAMEDUCK_DRAIN_MODE": "IDLE", "LAMEDUCK_PRESTOP": "TRUE", "LAMEDUCK_PROBE_ADDR": ":9090", "LAMEDUCK_CHECK_DETAILS": "Show"}
	c, _, errs := Config{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}.resolve()
	if len(errs) > 0 || c.Env != EnvKubernetes || c.DrainMode != DrainIdle || !c.PreStop || c.CheckDetails != CheckDetailsShow {
		t.Fatalf("%s %s %v %s %v", c.Env, c.DrainMode, c.PreStop, c.CheckDetails, errs)
	}
	c, _, errs = Config{Env: "Local", DrainMode: "Delay", LookupEnv: func(string) (string, bool) { return "", false }}.resolve()
	if len(errs) > 0 || c.Env != EnvLocal || c.DrainMode != DrainDelay {
		t.Fatalf("%s %s %v", c.Env, c.DrainMode, errs)
	}
}

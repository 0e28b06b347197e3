package kubebuild

import (
	"strings"
	"testing"
)

// A build's nice level comes from LDTEST_KUBE_BUILD_NICE, 19 when unset;
// a value that is not 0 to 19 stops each build before it resolves or
// compiles anything, with an error that names the setting and the value.
func TestNiceLevelFromTheEnvironment(t *testing.T) {
	for v, want := range map[string]string{"": "19", "0": "0", "19": "19", "7": "7"} {
		t.Setenv(NiceEnv, v)
		if got, err := niceness(); err != nil || got != want {
			t.Errorf("%s=%q: niceness() = %q, %v; want %q", NiceEnv, v, got, err, want)
		}
	}
	for _, v := range []string{"-1", "20", "low", "1.5"} {
		t.Setenv(NiceEnv, v)
		tg := Target{Work: t.TempDir(), Logf: t.Logf}
		for name, build := range map[string]func() error{
			"Kubernetes": func() error { return Kubernetes(t.Context(), tg) },
			"Traefik":    func() error { return Traefik(t.Context(), tg) },
		} {
			err := build()
			if err == nil || !strings.Contains(err.Error(), NiceEnv+`="`+v+`"`) || !strings.Contains(err.Error(), "0 (normal priority) to 19") {
				t.Errorf("%s with %s=%q: %v; want an error naming the setting, the value and the range", name, NiceEnv, v, err)
			}
		}
	}
}

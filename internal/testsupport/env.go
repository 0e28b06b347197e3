package testsupport

import "strings"

// EnvList returns a LookupEnv and an Environ, for lameduck.Config and the
// settings of worker and the integrations, that read only kv: "KEY=value"
// entries, a later one winning.
func EnvList(kv []string) (lookup func(string) (string, bool), environ func() []string) {
	m := map[string]string{}
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }, func() []string { return kv }
}

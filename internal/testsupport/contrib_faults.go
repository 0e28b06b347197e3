package testsupport

import (
	"testing"

	"github.com/lameduck/lameduck/health"
)

// ProxiedFaults returns the Faults scenario for a client that reaches the
// server at target (host:port) through a Proxy of the test's own. check
// builds the check under test, named name, critical or not, on a client
// that dials addr, the proxy's address ("127.0.0.1:port"); each call makes
// a new proxy, and Down cuts the latest, Up restores it, Stall stalls it.
// Set the returned Faults' Secrets and OutageWord where the scenario needs
// them.
func ProxiedFaults(target string, check func(t testing.TB, name string, critical bool, addr string) health.Check) Faults {
	var proxy *Proxy
	return Faults{
		Check: func(t testing.TB, name string, critical bool) health.Check {
			proxy = NewProxy(t, target)
			return check(t, name, critical, proxy.Addr())
		},
		Down:  func(testing.TB) { proxy.Cut() },
		Up:    func(testing.TB) { proxy.Restore() },
		Stall: func(testing.TB) { proxy.Stall() },
	}
}

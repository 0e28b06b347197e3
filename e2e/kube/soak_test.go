package kube_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkSoak is the long run behind docs/kubernetes.md's soak table,
// never part of CI: each contender in turn (lameduck's chart as shipped,
// the hand-written lame duck, Go's default server with `preStop: sleep 5`,
// Go's default server alone) takes every client shape's load at once —
// fresh connections, an HTTP/1.1 keep-alive pool, HTTP/2 over h2c, nginx
// as a service-upstream proxy, Traefik routing to the endpoints —
// alternating GET and POST, while its
// Deployment goes through rolling restart after rolling restart. lameduck
// must fail and re-send nothing, as in TestTrafficBesideControls (requests
// the client wrote on a connection its server had already closed are
// counted apart); the table of every count is logged and, with
// LDTEST_SOAK_TABLE, written to that file with the date and the machine.
//
// It needs what the cluster suite needs (root, a running cluster) and
// runs once whatever -benchtime says:
//
//	go test -run '^$' -bench Soak -timeout 3h ./e2e/kube
//
// LDTEST_SOAK_RATE is each shape's rate in requests a second (default
// 200: 1000 a second in all across the five shapes, what two cores
// sustain beside the cluster without -race); LDTEST_SOAK_RESTARTS the
// rolling restarts per
// contender (default 20), each one of the 3 replicas with one surge.
func BenchmarkSoak(b *testing.B) {
	needCluster(b)
	rate := soakSetting(b, "LDTEST_SOAK_RATE", 200)
	restarts := soakSetting(b, "LDTEST_SOAK_RESTARTS", 20)
	start := time.Now()
	var outcomes []outcome
	for _, c := range contenders() {
		outcomes = append(outcomes, runContender(b, c, rate, func(e *env, name string) ([]leaving, int) {
			var out []leaving
			for i := range restarts {
				from := time.Now()
				e.restart(name)
				e.waitRolledOut(name, 4*time.Minute)
				out = append(out, leaving{"rolling restart", from, time.Now()})
				b.Logf("%s: rolling restart %d of %d done in %.1fs", name, i+1, restarts, time.Since(from).Seconds())
			}
			return out, 3 * restarts
		})...)
		if b.Failed() {
			break
		}
	}
	table := outcomeTable(outcomes, []string{"rolling restart"})
	head := fmt.Sprintf("Soak of %s (UTC), %d rolling restarts per server, %d requests a second per client shape (%d in all), %s, %d CPUs, in %s:\n\n",
		start.UTC().Format("2006-01-02 15:04"), restarts, rate, rate*len(clientShapes), runtime.GOOS+"/"+runtime.GOARCH,
		runtime.NumCPU(), time.Since(start).Round(time.Second))
	b.Logf("%s%s", head, table)
	if path := os.Getenv("LDTEST_SOAK_TABLE"); path != "" {
		if err := os.WriteFile(path, []byte(head+table), 0o644); err != nil {
			b.Error(err)
		}
	}
	var lameduck, controls int
	for _, o := range outcomes {
		n := o.Result.Failed + o.Result.Resent
		if strings.HasPrefix(o.Contender, "lameduck") {
			lameduck += n - o.Result.LateFailed - o.Result.LateResent
		} else {
			controls += n
		}
	}
	b.ReportMetric(float64(lameduck), "lameduck-lost")
	b.ReportMetric(float64(controls), "controls-lost")
}

// soakSetting reads a positive whole number from the environment: def
// when unset, a failure naming the variable on anything else.
func soakSetting(b *testing.B, key string, def int) int {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive whole number, such as %s=%d", key, v, key, def)
	}
	return n
}

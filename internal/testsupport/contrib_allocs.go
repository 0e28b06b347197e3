package testsupport

import "testing"

// NoExtraAllocs fails t unless a call of tracked (a request through the
// integration's middleware) allocates exactly as often as a call of bare
// (the same request without it), counted by testing.AllocsPerRun over 1000
// runs each after one warm-up call of each. what names the request in the
// failure ("a Fiber request"). Skip it under the race detector, whose
// sync.Pool drops items on purpose.
func NoExtraAllocs(t testing.TB, what string, bare, tracked func()) {
	t.Helper()
	bare()
	tracked()
	nb := testing.AllocsPerRun(1000, bare)
	nt := testing.AllocsPerRun(1000, tracked)
	if nt != nb {
		t.Fatalf("%s allocates %.1f times with the middleware, %.1f without; want no difference", what, nt, nb)
	}
}

// BenchBareAndTracked runs b's sub-benchmarks "bare" and "tracked",
// reporting allocations, for benchstat to compare: each makes its handler
// once with handler(b, tracked) and runs in parallel (b.RunParallel), each
// goroutine calling the function run(h) returns once per iteration. run is
// called once per goroutine, so it may set up that goroutine's own state,
// such as a request to reuse.
func BenchBareAndTracked[H any](b *testing.B, handler func(tb testing.TB, tracked bool) H, run func(h H) func()) {
	for _, tracked := range []bool{false, true} {
		name := "bare"
		if tracked {
			name = "tracked"
		}
		b.Run(name, func(b *testing.B) {
			h := handler(b, tracked)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				call := run(h)
				for pb.Next() {
					call()
				}
			})
		})
	}
}

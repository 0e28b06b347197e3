package testsupport

import "runtime"

// AllStacks returns every goroutine's stack, as runtime.Stack prints them
// with all set, whatever their length (the buffer grows until they fit).
func AllStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

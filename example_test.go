package lameduck_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/lameduck/lameduck"
)

// A service registers its server and startup work, then Run serves until the
// shutdown sequence has finished. Here the sequence is started by a call, as
// a test or an embedding program would; in production SIGTERM starts it.
func ExampleLifecycle_Run() {
	lc, err := lameduck.New(lameduck.Config{
		ShutdownDelay:    lameduck.NoDelay, // no lame-duck window, for the example
		ShutdownTeardown: 5 * time.Second,
		LookupEnv:        func(string) (string, bool) { return "", false },
		Logger:           slog.New(slog.DiscardHandler),
		IgnoreSignals:    true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	lc.AddServer(&http.Server{Handler: http.NotFoundHandler()}, ln)
	lc.AddStartupTask("warm-up", func(ctx context.Context) error { return nil })

	go func() {
		<-lc.Events().StartupDone.Done()
		lc.BeginShutdown("example") // /readyz is 503 when this returns
	}()
	err = lc.Run(context.Background())
	fmt.Println("Run:", err)
	fmt.Println("phase:", lc.Phase())
	rec := httptest.NewRecorder()
	lc.ProbeHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	fmt.Println("/readyz:", rec.Code)
	start, _ := lc.Events().ShutdownInitiated.At()
	end, _ := lc.Events().Stopped.At()
	fmt.Println("within the bound:", end.Sub(start) <= 5*time.Second)
	// Output:
	// Run: <nil>
	// phase: stopped
	// /readyz: 503
	// within the bound: true
}

// Bad settings are refused before anything listens, with the variable, the
// value and the fix.
func ExampleNew_badSetting() {
	_, err := lameduck.New(lameduck.Config{
		LookupEnv: func(k string) (string, bool) {
			if k == "LAMEDUCK_SHUTDOWN_DELAY" {
				return "5", true
			}
			return "", false
		},
	})
	fmt.Println(err)
	// Output:
	// lameduck: LAMEDUCK_SHUTDOWN_DELAY="5": a duration needs a unit (write 5s or 5ms); set it to a Go duration with a unit, such as "5s", or unset it: invalid configuration
}

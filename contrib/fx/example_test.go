package ldfx_test

import (
	"io"
	"net/http"
	"time"

	"github.com/lameduck/lameduck"
	ldfx "github.com/lameduck/lameduck/contrib/fx"
	"go.uber.org/fx"
)

// An fx application that keeps calling app.Run(): the option provides the
// Lifecycle, the server is registered on it instead of in an fx hook, and
// SIGTERM drains the requests in flight before the fx OnStop hooks close
// what they opened.
func ExampleOption() {
	app := fx.New(
		ldfx.Option(lameduck.Config{}),
		fx.Provide(http.NewServeMux),
		fx.Invoke(func(lc *lameduck.Lifecycle, mux *http.ServeMux) error {
			mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello\n") })
			return lc.AddServer(&http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}, nil)
		}),
	)
	_ = app // app.Run() serves :8080 with /healthz, /readyz and /startupz, and drains it on SIGTERM.
}

// Command after is the fx application of internal/adopt/before adopting
// lameduck: one option, and its server registered on the Lifecycle instead
// of in an fx hook. docs/fx.md shows the diff, which adopt_test.go checks.
package main

import (
	"net/http"
	"time"

	"github.com/lameduck/lameduck"
	ldfx "github.com/lameduck/lameduck/contrib/fx"
	"go.uber.org/fx"
)

func NewServeMux() *http.ServeMux { return http.NewServeMux() }

func NewHTTPServer(lc *lameduck.Lifecycle, mux *http.ServeMux) (*http.Server, error) {
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv, lc.AddServer(srv, nil)
}

func main() {
	fx.New(
		ldfx.Option(lameduck.Config{}),
		fx.Provide(NewHTTPServer, NewServeMux),
		fx.Invoke(func(*http.Server) {}),
	).Run()
}

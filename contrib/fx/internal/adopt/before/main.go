// Command before is an fx application as it is written without lameduck:
// its server started and stopped by an fx hook, run by app.Run().
// internal/adopt/after is the same application adopting lameduck.
package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"go.uber.org/fx"
)

func NewServeMux() *http.ServeMux { return http.NewServeMux() }

func NewHTTPServer(lc fx.Lifecycle, mux *http.ServeMux) *http.Server {
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ln, err := net.Listen("tcp", srv.Addr)
			if err != nil {
				return err
			}
			go srv.Serve(ln)
			return nil
		},
		OnStop: func(ctx context.Context) error {
			return srv.Shutdown(ctx)
		},
	})
	return srv
}

func main() {
	fx.New(
		fx.Provide(NewHTTPServer, NewServeMux),
		fx.Invoke(func(*http.Server) {}),
	).Run()
}

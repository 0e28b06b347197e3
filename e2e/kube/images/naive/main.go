// Command naive is the reference server that lameduck's cluster tests
// compare the demo with: the HTTP server a service gets without lameduck.
// It handles no signal, so SIGTERM ends it at once (Go's default), and its
// /readyz answers 200 until the process is gone. It serves the same routes
// as `lameduck demo` that the load uses: GET / and POST /echo.
package main

import (
	"cmp"
	"io"
	"log"
	"net/http"
	"os"
)

func main() {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"ok"}`) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("GET /startupz", ok)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from naive\n") })
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })
	addr := ":" + cmp.Or(os.Getenv("PORT"), "8080")
	log.Fatal(http.ListenAndServe(addr, mux))
}

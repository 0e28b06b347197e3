package ldfasthttp_test

import (
	"bufio"
	"fmt"
	"log"
	"net"

	"github.com/lameduck/lameduck"
	ldfasthttp "github.com/lameduck/lameduck/contrib/fasthttp"
	"github.com/valyala/fasthttp"
)

// A fasthttp server under the Lifecycle: the middleware answers the probes
// and tracks every other request; AddServer has Run serve it on :8080 and
// drain it in the shutdown sequence.
func ExampleAddServer() {
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: ldfasthttp.New(lc).Handler(func(fc *fasthttp.RequestCtx) {
		fc.SetBodyString("hello\n")
	})}
	if err := ldfasthttp.AddServer(lc, srv, ":8080", nil); err != nil {
		log.Fatal(err)
	}
	// lc.Run(ctx) serves it, and drains it on SIGTERM.
}

// Server-sent events: the stream is a request in flight until fn returns,
// and fn ends it with a final event when the lame-duck window ends.
func ExampleStream() {
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	events := func(fc *fasthttp.RequestCtx) {
		fc.SetContentType("text/event-stream")
		ldfasthttp.Stream(lc, fc, func(w *bufio.Writer) {
			<-lc.Events().WindowEnded.Done()
			fmt.Fprint(w, "event: bye\ndata: reconnect\n\n")
			_ = w.Flush()
		})
	}
	_ = events // the handler of GET /events
}

// A framework built on fasthttp (here a bare fasthttp.Server standing for
// it) joins the shutdown sequence as the Fiber modules do: ServerFuncs
// gives the order of its teardown, from the framework's own serve and
// graceful stop, and the framework's first middleware calls Begin and End
// around every request.
func ExampleServerFuncs() {
	lc, err := lameduck.New(lameduck.Config{})
	if err != nil {
		log.Fatal(err)
	}
	m := ldfasthttp.New(lc)
	srv := &fasthttp.Server{Handler: func(fc *fasthttp.RequestCtx) {
		tr, answered := m.Begin(fc) // a probe, or a refusal: already answered
		if answered {
			return
		}
		defer m.End(fc, tr)
		fc.SetBodyString("served by the framework's router\n")
	}}
	serve := func(ln net.Listener) error { return srv.Serve(ln) } // the framework's serve-on-a-listener
	funcs := ldfasthttp.ServerFuncs(lc, "myframework", srv, serve, srv.ShutdownWithContext)
	funcs.Addr = ":8080"
	if err := lc.AddServerFuncs(funcs, nil); err != nil {
		log.Fatal(err)
	}
}

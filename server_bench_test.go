package lameduck_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkLoopbackServer measures a real HTTP server on loopback at
// saturation, with and without lameduck's request tracking, in the same
// run: parallel keep-alive clients hammer GET /api. It reports requests per
// second (req/s) beside ns/op; compare the two with benchstat.
func BenchmarkLoopbackServer(b *testing.B) {
	run := func(b *testing.B, h http.Handler) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		defer srv.Close()
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		url := "http://" + ln.Addr().String() + "/api"
		b.SetParallelism(4)
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := c.Get(url)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	}
	b.Run("bare", func(b *testing.B) { run(b, okHandler) })
	b.Run("tracked", func(b *testing.B) {
		_, h := trackedHandler(b, okHandler)
		run(b, h)
	})
}

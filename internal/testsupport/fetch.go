package testsupport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Reply is what an HTTP request got: the status code, the headers, the
// whole body, and whether the server asked to close the connection
// (Connection: close).
type Reply struct {
	Code   int
	Header http.Header
	Body   string
	Close  bool
}

// Fetch sends one request through c with the headers hdr (nil for none)
// and reads the whole answer. It returns an error naming the method and
// URL when the request or the body's read fails. It never touches a
// testing.T, so it is safe in any goroutine; on the test's own goroutine
// use Do.
func Fetch(c *http.Client, method, url string, hdr map[string]string) (Reply, error) {
	return FetchContext(context.Background(), c, method, url, hdr)
}

// FetchContext is Fetch with the request bound to ctx: it ends, with ctx's
// error wrapped, when ctx does, and carries what ctx carries (an
// httptrace.ClientTrace).
func FetchContext(ctx context.Context, c *http.Client, method, url string, hdr map[string]string) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return Reply{}, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return Reply{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	return Reply{resp.StatusCode, resp.Header, string(b), resp.Close}, nil
}

// Do is Fetch on the test's goroutine: it fails t when the request fails.
func Do(t testing.TB, c *http.Client, method, url string, hdr map[string]string) Reply {
	t.Helper()
	a, err := Fetch(c, method, url, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Fetched is what Fetch returned in the goroutine GoFetch started.
type Fetched struct {
	Reply
	Err error
}

// GoFetch runs Fetch (no extra headers) in a goroutine and delivers its
// result on the returned channel (buffered: the goroutine never blocks).
// Receive it with Recv, so a request that never ends fails the test
// instead of hanging it.
func GoFetch(c *http.Client, method, url string) <-chan Fetched {
	ch := make(chan Fetched, 1)
	go func() {
		a, err := Fetch(c, method, url, nil)
		ch <- Fetched{a, err}
	}()
	return ch
}

// OK fails t when the fetch failed, and returns its answer.
func (f Fetched) OK(t testing.TB) Reply {
	t.Helper()
	if f.Err != nil {
		t.Fatal(f.Err)
	}
	return f.Reply
}

// Status fails t unless the answer has the status code and a JSON probe
// body whose "status" is word ("ok", "draining", ...).
func (a Reply) Status(t testing.TB, code int, word string) {
	t.Helper()
	if a.Code != code || !strings.Contains(a.Body, `"status":"`+word+`"`) {
		t.Fatalf("got %d %s; want %d status %q", a.Code, a.Body, code, word)
	}
}

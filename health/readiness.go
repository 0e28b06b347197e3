package health

import (
	"bytes"
	"errors"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ServeReadiness answers a readiness probe of a serving pod by running the
// checks and gates (see [Checker.Run]) and rendering the report with
// [WriteNegotiated]. It follows the Kubernetes API server's conventions:
//
//   - path is the request path below the readiness root, without the
//     leading slash: "" for /readyz (every check and gate), "db" for
//     /readyz/db (that one alone; same criticality rule, so a failing
//     non-critical check answers 200 "degraded"). A leading "/" is
//     tolerated. The caller strips its own prefix ("/readyz/");
//   - ?exclude=<name>, repeatable, leaves checks out;
//   - ?verbose answers the plain-text report; Accept:
//     application/health+json answers the IETF draft's format; otherwise
//     the JSON envelope of [Write];
//   - extra is merged into the envelope's fields (such as "phase"); it is
//     read, not modified, and may be nil.
//
// A method other than GET or HEAD is answered 405 with "Allow: GET, HEAD"
// and runs nothing. A path or exclude naming no registered check or gate is
// answered 404 "not found", with the fields "error" (the message, which
// lists the known names) and "known" (the names, sorted); in ?verbose form
// the body is that message alone. Codes otherwise: 200 "ok", 200
// "degraded", 503 "failed".
//
// ServeReadiness knows nothing of phases: the caller answers "starting" and
// "draining" itself, without calling it (a draining pod never consults a
// check), using [WriteNegotiated] so those answers come in the format
// asked for too. The probe's context is r.Context(). Safe for concurrent
// use.
func (c *Checker) ServeReadiness(w http.ResponseWriter, r *http.Request, info *Info, path string, extra map[string]any) {
	if !AllowedMethod(w, r, info) {
		return
	}
	c.hdr.once.Do(c.hdr.init)
	name := strings.TrimPrefix(path, "/")
	var exclude []string
	if r.URL != nil && r.URL.RawQuery != "" {
		exclude = r.URL.Query()["exclude"]
	}
	sb := c.serveBufs.get()
	defer c.serveBufs.put(sb)
	rep, err := c.run(r.Context(), name, exclude, sb.results, false)
	if err != nil {
		c.writeUnknown(w, r, info, err, extra)
		return
	}
	sb.results = rep.Results[:0] // keep a grown buffer
	rep.Fields = extra           // run sets no Fields; rendering only reads them
	h := w.Header()
	if len(h["Vary"]) == 0 {
		h["Vary"] = c.hdr.vary // prepared once; see preparedHeaders
	} else {
		h.Add("Vary", "Accept")
	}
	if wantsVerbose(r) || acceptsHealthJSON(r) {
		writeNegotiatedBody(w, r, info, rep)
		return
	}
	// The JSON envelope, as Write writes it, from prepared headers and a
	// pooled buffer.
	h["Content-Type"] = c.hdr.json
	h["Cache-Control"] = c.hdr.noStore
	if r.Method == http.MethodHead {
		w.WriteHeader(rep.code())
		return
	}
	sb.body.Reset()
	renderJSON(&sb.body, info, rep)
	h["Content-Length"] = c.hdr.contentLength(sb.body.Len())
	w.WriteHeader(rep.code())
	_, _ = w.Write(sb.body.Bytes())
}

// serveBuf is what one ServeReadiness call borrows: room for the results
// and the body. A pool of them costs a busy probe endpoint no allocation
// for either.
type serveBuf struct {
	results []Result
	body    bytes.Buffer
}

// serveBufPool is a sync.Pool of *serveBuf; its zero value is ready.
type serveBufPool struct{ p sync.Pool }

func (p *serveBufPool) get() *serveBuf {
	if sb, ok := p.p.Get().(*serveBuf); ok {
		return sb
	}
	return new(serveBuf)
}

func (p *serveBufPool) put(sb *serveBuf) {
	if sb.body.Cap() > 64<<10 || cap(sb.results) > 1024 {
		return // an outsized probe's buffers go to the collector
	}
	clear(sb.results[:cap(sb.results)]) // drop the texts' references
	p.p.Put(sb)
}

// preparedHeaders are the header values ServeReadiness sets, each made
// once per Checker: assigning a prepared []string to the header map costs
// no allocation, where Header.Set makes one per call. Each has capacity 1,
// so a later Header.Add by a middleware copies rather than writes into it.
type preparedHeaders struct {
	once                sync.Once
	vary, json, noStore []string
	clen                atomic.Pointer[contentLength] // the last Content-Length set
}

type contentLength struct {
	n int
	v []string
}

func (ph *preparedHeaders) init() {
	ph.vary = []string{"Accept"}
	ph.json = []string{"application/json"}
	ph.noStore = []string{"no-store"}
}

// contentLength returns the prepared Content-Length value for n bytes:
// the one made last time when n is the same (a healthy probe's body length
// does not change), else a new one.
func (ph *preparedHeaders) contentLength(n int) []string {
	if cl := ph.clen.Load(); cl != nil && cl.n == n {
		return cl.v
	}
	cl := &contentLength{n: n, v: []string{strconv.Itoa(n)}}
	ph.clen.Store(cl)
	return cl.v
}

func (c *Checker) writeUnknown(w http.ResponseWriter, r *http.Request, info *Info, err error, extra map[string]any) {
	code, status := http.StatusNotFound, Status("not found")
	if !errors.Is(err, ErrUnknownCheck) { // Run returns no other error today
		code, status = http.StatusInternalServerError, "error"
	}
	if wantsVerbose(r) {
		w.Header().Add("Vary", "Accept")
		writeBody(w, r, "text/plain; charset=utf-8", code, func() []byte { return []byte(err.Error() + "\n") })
		return
	}
	known := c.Names()
	if known == nil {
		known = []string{}
	}
	fields := make(map[string]any, len(extra)+2)
	maps.Copy(fields, extra)
	fields["error"] = err.Error()
	fields["known"] = known
	WriteNegotiated(w, r, info, Report{Status: status, Code: code, Fields: fields})
}

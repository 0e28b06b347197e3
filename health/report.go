package health

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Report is one probe answer before it is rendered.
//
// The zero value is a 503 with an empty status word; callers always set
// Status. A Report is a value: it is built per request and not shared.
type Report struct {
	// Status is the body's "status" word; it also decides the HTTP code
	// unless Code is set.
	Status Status
	// Code overrides the HTTP status code; 0 means Status.Code().
	Code int
	// Fields are extra members of the JSON envelope, such as "phase". They
	// never replace the reserved members status, version, commit and checks.
	Fields map[string]any
	// Checks maps a check's name to its result text ("ok",
	// "error: connection refused", ...). Rendered as the "checks" object;
	// omitted when nil.
	Checks map[string]string
	// Results, when set by [Checker.Run], holds the same results as Checks
	// with their criticality and timing, in name order. The verbose text and
	// application/health+json renderings use it to tell a critical failure
	// ("fail", [-]) from a degraded one ("warn"); without it they judge from
	// Checks alone. The JSON rendering ignores it.
	Results []Result
	// Excluded lists the names left out by ?exclude, sorted; the verbose
	// text prints them as "[+]<name> excluded: ok" (the Kubernetes API
	// server's convention). Other renderings ignore it.
	Excluded []string
	// Unmatched lists the ?exclude names that match no check or gate; they
	// are ignored, and the verbose text warns "warn: some health checks
	// cannot be excluded: no matches for ..." (the Kubernetes API server's
	// convention). Other renderings ignore it.
	Unmatched []string

	// checksInResults says that Checks is nil and the checks are in
	// Results, sorted by name (a report ServeReadiness renders at once,
	// without building the map).
	checksInResults bool
}

// Info names the build that answers. Every body carries its Version and
// Commit, so a probe response also tells which build answered.
//
// The zero value renders empty strings; use [BuildInfo] to fill it. An Info
// must not be modified once a handler uses it; Fields may be called
// concurrently by concurrent probes and must be safe for that.
type Info struct {
	// Version is written as "version".
	Version string
	// Commit is written as "commit".
	Commit string
	// Fields, when non-nil, is called once per probe and its members are
	// added to the envelope, such as {"mode":"cloud"}. Members named status,
	// version, commit or checks are ignored: the envelope's own win.
	Fields func() map[string]any
	// HideDetails, when true, makes every rendering that takes this Info
	// ([Write], [Render], [RenderHealthJSON], [WriteNegotiated], ?verbose
	// included) show each check's and gate's outcome word alone, never its
	// error, panic or reason text: see [Report.WithoutDetails]. Use it for
	// probes on a port that people outside the cluster can reach. Status
	// words and codes are unchanged.
	HideDetails bool
}

var reserved = []string{"status", "version", "commit", "checks"}

// Write renders rep to w as the answer to r.
//
// It sets Content-Type: application/json and Cache-Control: no-store, writes
// the status code (rep.Code, or rep.Status.Code()), and, unless r is a HEAD
// request, a body shaped like
//
//	{"status":"degraded","version":"v1.2.0","commit":"a984b10",
//	 "phase":"serving","checks":{"db":"ok","s3":"error: connection refused"}}
//
// status, version and commit come first; info.Fields() and rep.Fields follow
// in sorted order (rep.Fields win a clash); checks come last. A value that
// cannot be encoded as JSON is written as its error text rather than
// dropping the whole body. Write does not check the method; see [Handler].
func Write(w http.ResponseWriter, r *http.Request, info *Info, rep Report) {
	code := rep.Code
	if code == 0 {
		code = rep.Status.Code()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		w.WriteHeader(code)
		return
	}
	body := Render(info, rep)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// Render returns the JSON body [Write] would send for rep, with a trailing
// newline. It is safe for concurrent use.
func Render(info *Info, rep Report) []byte {
	var b bytes.Buffer
	renderJSON(&b, info, rep)
	return b.Bytes()
}

// renderJSON appends Render's body to b.
func renderJSON(b *bytes.Buffer, info *Info, rep Report) {
	rep = hideIf(info, rep)
	var kbuf [8]string
	keys, extra := envelopeFields(info, rep, reserved, kbuf[:0])

	b.Grow(128 + 64*max(len(rep.Checks), len(rep.Results)))
	b.WriteString(`{"status":`)
	writeJSONString(b, string(rep.Status))
	var version, commit string
	if info != nil {
		version, commit = info.Version, info.Commit
	}
	b.WriteString(`,"version":`)
	writeJSONString(b, version)
	b.WriteString(`,"commit":`)
	writeJSONString(b, commit)
	for _, k := range keys {
		b.WriteByte(',')
		writeJSONString(b, k)
		b.WriteByte(':')
		writeJSON(b, fieldValue(k, rep.Fields, extra))
	}
	switch {
	case rep.Checks != nil:
		b.WriteString(`,"checks":`)
		writeStringMap(b, rep.Checks)
	case rep.checksInResults:
		b.WriteString(`,"checks":`)
		writeResultsMap(b, rep.Results)
	}
	b.WriteString("}\n")
}

// callFields calls the application's Fields, recovering a panic: a broken
// field must never break a probe (liveness least of all). The body then
// says {"fields_error":"panic in Info.Fields"}, without the panic's value,
// which could carry a secret.
func callFields(f func() map[string]any) (m map[string]any) {
	defer func() {
		if v := recover(); v != nil {
			m = map[string]any{"fields_error": "panic in Info.Fields"}
		}
	}()
	return f()
}

// envelopeFields calls info.Fields and returns its members (extra) and the
// keys of the envelope's fields, those of extra and of rep.Fields, sorted,
// without duplicates and without the reserved ones, appended to keys (a
// caller's buffer). Read a key's value with fieldValue: rep.Fields win a
// clash.
func envelopeFields(info *Info, rep Report, reserved []string, keys []string) ([]string, map[string]any) {
	var extra map[string]any
	if info != nil && info.Fields != nil {
		extra = callFields(info.Fields)
	}
	for k := range rep.Fields {
		if !slices.Contains(reserved, k) {
			keys = append(keys, k)
		}
	}
	for k := range extra {
		if _, dup := rep.Fields[k]; !dup && !slices.Contains(reserved, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, extra
}

// fieldValue returns the value of an envelope field: fields' (the
// report's) when it has k, else extra's (Info.Fields').
func fieldValue(k string, fields, extra map[string]any) any {
	if v, ok := fields[k]; ok {
		return v
	}
	return extra[k]
}

func writeJSON(b *bytes.Buffer, v any) {
	if str, ok := v.(string); ok {
		writeJSONString(b, str)
		return
	}
	out, err := json.Marshal(v)
	if err != nil {
		out, _ = json.Marshal("unencodable: " + err.Error())
	}
	b.Write(out)
}

// Handler returns an [http.Handler] that answers GET and HEAD requests with
// the [Report] that probe returns, rendered by [Write].
//
// Any other method gets 405 Method Not Allowed with "Allow: GET, HEAD" and a
// JSON body {"status":"method not allowed", ...}; probe is not called.
// probe is called once per request, concurrently for concurrent requests,
// and must be safe for that.
func Handler(info *Info, probe func(*http.Request) Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !AllowedMethod(w, r, info) {
			return
		}
		Write(w, r, info, probe(r))
	})
}

// AllowedMethod reports whether r is a GET or HEAD request. When it is not,
// it has already answered 405 with "Allow: GET, HEAD" and the caller must
// write nothing more.
func AllowedMethod(w http.ResponseWriter, r *http.Request, info *Info) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	Write(w, r, info, Report{Status: "method not allowed", Code: http.StatusMethodNotAllowed})
	return false
}

// writeStringMap writes m as a JSON object with sorted keys, as
// encoding/json would, without its reflection.
func writeStringMap(b *bytes.Buffer, m map[string]string) {
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, k)
		b.WriteByte(':')
		writeJSONString(b, m[k])
	}
	b.WriteByte('}')
}

// writeResultsMap writes results, sorted by name, as the JSON object of
// their texts that writeStringMap writes for the Checks map.
func writeResultsMap(b *bytes.Buffer, results []Result) {
	b.WriteByte('{')
	for i := range results {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, results[i].Name)
		b.WriteByte(':')
		writeJSONString(b, results[i].Text)
	}
	b.WriteByte('}')
}

// writeJSONString writes s as a JSON string exactly as encoding/json's
// Marshal does (HTML-safe escapes, U+2028 and U+2029 escaped, invalid UTF-8
// as U+FFFD), without its reflection; TestJSONStringMatchesEncodingJSON
// holds it to that.
func writeJSONString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b.WriteString(s[start:i])
			switch c {
			case '"', '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			default:
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString(s[start:i])
			b.WriteString(`\ufffd`)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b.WriteString(s[start:i])
			b.WriteString(`\u202`)
			b.WriteByte(hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

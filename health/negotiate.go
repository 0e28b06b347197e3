package health

import (
	"bytes"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MediaTypeHealthJSON is the media type of the IETF health check response
// format (draft-inadarei-api-health-check, "application/health+json").
const MediaTypeHealthJSON = "application/health+json"

// healthJSONReserved are the top-level members of application/health+json
// that Fields never replace.
var healthJSONReserved = []string{"status", "version", "releaseId", "notes", "output", "checks", "links", "serviceId", "description"}

// WriteNegotiated renders rep as the answer to r in the format r asks for,
// so every readiness answer (a short-circuit such as "draining" or
// "starting" as much as a report from [Checker.Run]) comes in the same
// format:
//
//   - ?verbose (any value, the Kubernetes API server's convention): a
//     plain-text report, see [RenderVerbose], with Content-Type
//     "text/plain; charset=utf-8";
//   - otherwise an Accept header that lists application/health+json with a
//     non-zero q: the IETF draft's format, see [RenderHealthJSON], with
//     Content-Type application/health+json;
//   - otherwise JSON, exactly as [Write].
//
// Every form carries Cache-Control: no-store and Vary: Accept, and the
// status code rep.Code, or rep.Status.Code() when that is 0 (200 for ok and
// degraded, 503 otherwise; the draft's pass and warn are 2xx, fail is
// 5xx). A HEAD request gets the headers and no body. WriteNegotiated does
// not check the method (see [AllowedMethod]) and does not run checks.
// When info.HideDetails is set, every form shows each check's outcome word
// alone ([Report.WithoutDetails]). It is safe for concurrent use.
func WriteNegotiated(w http.ResponseWriter, r *http.Request, info *Info, rep Report) {
	w.Header().Add("Vary", "Accept")
	writeNegotiatedBody(w, r, info, rep)
}

// writeNegotiatedBody is WriteNegotiated after its Vary header.
func writeNegotiatedBody(w http.ResponseWriter, r *http.Request, info *Info, rep Report) {
	switch {
	case wantsVerbose(r):
		writeBody(w, r, "text/plain; charset=utf-8", rep.code(), func() []byte { return RenderVerbose(hideIf(info, rep)) })
	case acceptsHealthJSON(r):
		writeBody(w, r, MediaTypeHealthJSON, rep.code(), func() []byte { return RenderHealthJSON(info, rep) })
	default:
		Write(w, r, info, rep)
	}
}

func (rep Report) code() int {
	if rep.Code != 0 {
		return rep.Code
	}
	return rep.Status.Code()
}

func writeBody(w http.ResponseWriter, r *http.Request, contentType string, code int, body func() []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodHead {
		w.WriteHeader(code)
		return
	}
	b := body()
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// wantsVerbose reports whether the query has a verbose parameter, with or
// without a value.
func wantsVerbose(r *http.Request) bool {
	return r.URL != nil && r.URL.RawQuery != "" && r.URL.Query().Has("verbose")
}

// acceptsHealthJSON reports whether an Accept header names
// application/health+json with q > 0. Wildcards do not count: the plain
// JSON envelope stays the default.
func acceptsHealthJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if !strings.Contains(strings.ToLower(v), "health+json") {
			continue
		}
		for _, part := range strings.Split(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != MediaTypeHealthJSON {
				continue
			}
			if q, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(q, 64); err != nil || f <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

// line is one check's line in the verbose and health+json renderings.
type line struct {
	name     string
	text     string
	passing  bool
	critical bool // known only from Results; assumed when judging from Checks
	gate     bool
	at       time.Time
	age      string // a cached result's age, rounded; "" for a fresh one
}

// lines returns rep's results in name order, from Results when set, else
// from Checks.
func lines(rep Report) []line {
	if rep.Results != nil {
		out := make([]line, len(rep.Results))
		for i, r := range rep.Results {
			out[i] = line{name: r.Name, text: r.Text, passing: r.Outcome.Passing(), critical: r.Critical, gate: r.Gate, at: r.Time}
			if r.Cached {
				out[i].age = roundAge(r.Age).String()
			}
		}
		return out
	}
	out := make([]line, 0, len(rep.Checks))
	for name, text := range rep.Checks {
		word, _, _ := strings.Cut(text, ":")
		out = append(out, line{name: name, text: text, passing: Outcome(word).Passing(), critical: true})
	}
	slices.SortFunc(out, func(a, b line) int { return strings.Compare(a.name, b.name) })
	return out
}

// ageNote is the verbose text's note on a cached result: " (age 350ms)".
func ageNote(age string) string {
	if age == "" {
		return ""
	}
	return " (age " + age + ")"
}

// roundAge rounds a cached result's age for a body: to the millisecond.
func roundAge(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// RenderVerbose returns the plain-text report of ?verbose, in the
// Kubernetes API server's format: one line per check or gate in name order,
// "[+]<name> ok" for a pass ("[+]<name> skipped: <reason>" for a gate that
// does not apply), "[-]<name> failed: <result text>" for a failure (a gate
// failure reads "[-]<name> failed: <reason>"), then "[+]<name> excluded: ok"
// for each excluded name, then "readyz check passed" when the status code is
// below 400 and "readyz check failed" otherwise. A report with no checks and
// a failing status (the short-circuits "starting", "draining") gets the line
// "[-]<status>" first, so the text says why:
//
//	[+]db ok
//	[-]s3 failed: error: connection refused
//	readyz check passed
//
// A result read from an earlier ping within its check's MaxAge ends with its
// age: "[+]db ok (age 350ms)". A degraded report passes: its failing lines
// are non-critical. It is safe
// for concurrent use.
func RenderVerbose(rep Report) []byte {
	var b bytes.Buffer
	ls := lines(rep)
	for _, l := range ls {
		switch {
		case l.passing:
			b.WriteString("[+]" + l.name + " " + l.text + ageNote(l.age) + "\n")
		case strings.HasPrefix(l.text, string(OutcomeFailed)):
			b.WriteString("[-]" + l.name + " " + l.text + ageNote(l.age) + "\n")
		default:
			b.WriteString("[-]" + l.name + " failed: " + l.text + ageNote(l.age) + "\n")
		}
	}
	for _, x := range rep.Excluded {
		b.WriteString("[+]" + x + " excluded: ok\n")
	}
	if len(rep.Unmatched) > 0 {
		q := make([]string, len(rep.Unmatched))
		for i, x := range rep.Unmatched {
			q[i] = strconv.Quote(x)
		}
		b.WriteString("warn: some health checks cannot be excluded: no matches for " + strings.Join(q, ",") + "\n")
	}
	passed := rep.code() < 400
	if len(ls) == 0 && !passed {
		b.WriteString("[-]" + string(rep.Status) + "\n")
	}
	if passed {
		b.WriteString("readyz check passed\n")
	} else {
		b.WriteString("readyz check failed\n")
	}
	return b.Bytes()
}

// RenderHealthJSON returns rep in the IETF health check response format
// (draft-inadarei-api-health-check, media type application/health+json),
// with a trailing newline:
//
//	{"status":"warn","version":"v1.2.0","releaseId":"a984b10","output":"degraded",
//	 "phase":"serving",
//	 "checks":{"db":[{"componentType":"component","status":"pass","time":"2025-01-17T03:36:48.123Z"}],
//	           "s3":[{"componentType":"component","status":"warn","output":"error: connection refused","time":"…"}]}}
//
// status is "pass" for [StatusOK], "warn" for [StatusDegraded] and "fail"
// for every status answered with 4xx or 5xx (failed, starting, draining);
// version is info.Version and releaseId info.Commit (the draft's "release
// identifier"); output, the draft's place for a reason, carries rep.Status
// when not passing. The application's fields (info.Fields(), rep.Fields)
// follow, sorted, except those named like a member of the draft. checks
// has one single-element array per check or gate, keyed by its name:
// status "pass", "warn" for a failing non-critical check, "fail" for a
// failing critical check or gate; output the result text when not pass;
// componentType "component" for a check and "system" for a gate; time when
// the result was observed (RFC 3339, UTC, milliseconds); and, for a result
// read from an earlier ping within its check's MaxAge, age, how old it was
// ("350ms"). It is safe for concurrent use.
func RenderHealthJSON(info *Info, rep Report) []byte {
	rep = hideIf(info, rep)
	keys, extra := envelopeFields(info, rep, healthJSONReserved, nil)
	var b bytes.Buffer
	code := rep.code()
	status := "pass"
	switch {
	case code >= 400:
		status = "fail"
	case rep.Status == StatusDegraded:
		status = "warn"
	}
	b.WriteString(`{"status":`)
	writeJSON(&b, status)
	var version, commit string
	if info != nil {
		version, commit = info.Version, info.Commit
	}
	b.WriteString(`,"version":`)
	writeJSON(&b, version)
	b.WriteString(`,"releaseId":`)
	writeJSON(&b, commit)
	if status != "pass" {
		b.WriteString(`,"output":`)
		writeJSON(&b, string(rep.Status))
	}
	for _, k := range keys {
		b.WriteByte(',')
		writeJSON(&b, k)
		b.WriteByte(':')
		writeJSON(&b, fieldValue(k, rep.Fields, extra))
	}
	if ls := lines(rep); rep.Checks != nil || len(ls) > 0 {
		b.WriteString(`,"checks":{`)
		for i, l := range ls {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(&b, l.name)
			b.WriteString(`:[{"componentType":`)
			if l.gate {
				b.WriteString(`"system"`)
			} else {
				b.WriteString(`"component"`)
			}
			st := "pass"
			switch {
			case l.passing:
			case l.critical:
				st = "fail"
			default:
				st = "warn"
			}
			b.WriteString(`,"status":"` + st + `"`)
			if !l.passing {
				b.WriteString(`,"output":`)
				writeJSON(&b, l.text)
			}
			if !l.at.IsZero() {
				b.WriteString(`,"time":"` + l.at.UTC().Format("2006-01-02T15:04:05.000Z07:00") + `"`)
			}
			if l.age != "" {
				b.WriteString(`,"age":"` + l.age + `"`)
			}
			b.WriteString("}]")
		}
		b.WriteByte('}')
	}
	b.WriteString("}\n")
	return b.Bytes()
}

package health

import (
	"errors"
	"maps"
	"net/http"
	"strings"
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
	name := strings.TrimPrefix(path, "/")
	var exclude []string
	if r.URL != nil && r.URL.RawQuery != "" {
		exclude = r.URL.Query()["exclude"]
	}
	rep, err := c.Run(r.Context(), name, exclude)
	if err != nil {
		c.writeUnknown(w, r, info, err, extra)
		return
	}
	rep.Fields = extra // Run sets no Fields; rendering only reads them
	WriteNegotiated(w, r, info, rep)
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

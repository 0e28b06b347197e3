package health

import (
	"encoding/base64"
	"regexp"
	"strings"
)

// redacted replaces every secret Redact finds.
const redacted = "REDACTED"

// The patterns are compiled once and never modified; a *regexp.Regexp is
// safe for concurrent use.
var (
	// scheme://user:pass@host → scheme://REDACTED@host (the whole
	// user-info: user names leak more than one would think).
	reURLUserinfo = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s"'<>]+@`)
	// user:pass@tcp(host:3306)/db, the go-sql-driver/mysql DSN form.
	reDSNUserinfo = regexp.MustCompile(`(?i)(^|[\s"'=(])[^\s"'=():/@]+:[^\s"'@/]*@(tcp|tcp4|tcp6|unix|udp)\(`)
	// key=value and "key":"value" where the key names a secret:
	// password, passwd, pwd, token, secret, api_key / apikey / api-key,
	// with any prefix or suffix (db_password, access_token, X-Api-Key).
	reKeyValue = regexp.MustCompile(`(?i)([a-z0-9_.-]*(?:password|passwd|pwd|token|secret|api[_-]?key)[a-z0-9_.-]*)` +
		`(\s*=\s*|"\s*:\s*)` +
		`("[^"]*"|'[^']*'|[^\s&;,"'<>(){}\[\]]+)`)
	// Authorization: <anything to the end of the value>.
	reAuthHeader = regexp.MustCompile(`(?i)((?:proxy-)?authorization"?\s*[:=]\s*"?)([^"\r\n]+)`)
	// Bearer <token> anywhere.
	reBearer = regexp.MustCompile(`(?i)\b(bearer)\s+([a-z0-9._~+/-]+=*)`)
	// Basic <base64(user:pass)> anywhere; replaced only when the word
	// decodes to something with a colon, so "basic authentication failed"
	// keeps its words.
	reBasic = regexp.MustCompile(`(?i)\b(basic)\s+([a-z0-9+/]{4,}={0,2})`)
)

// Redact returns s with credentials replaced by "REDACTED". It is applied to
// every error, panic and gate text before that text reaches a response body
// or a log line, because probe bodies are read by people and tools outside
// the process (issue "Dependency checks": "Secrets never leave the
// process").
//
// It replaces:
//   - URL user-info: "postgres://app:s3cret@db:5432/x" becomes
//     "postgres://REDACTED@db:5432/x", and the MySQL DSN form
//     "app:s3cret@tcp(db:3306)/x" becomes "REDACTED@tcp(db:3306)/x";
//   - the value of a key=value or "key":"value" pair whose key contains
//     password, passwd, pwd, token, secret, apikey, api_key or api-key, in
//     any case ("password=hunter2", "access_token=abc", "X-Api-Key=k");
//   - the value of an Authorization or Proxy-Authorization header, to the
//     end of the line or the closing quote;
//   - "Bearer <token>", and "Basic <credentials>" when the credentials are
//     base64 of "user:password".
//
// Redact errs on the side of hiding: a word that merely looks like a secret
// is hidden too. It does not find secrets that carry no marker (a bare
// password in free text); for those, set CheckerOptions.HideErrors. Redact is
// safe for concurrent use.
func Redact(s string) string {
	if s == "" {
		return s
	}
	if strings.Contains(s, "@") {
		s = reURLUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
		s = reDSNUserinfo.ReplaceAllString(s, "${1}"+redacted+"@${2}(")
	}
	if strings.ContainsAny(s, "=:") {
		s = reKeyValue.ReplaceAllStringFunc(s, func(m string) string {
			sub := reKeyValue.FindStringSubmatch(m)
			v := redacted
			if q := sub[3][0]; q == '"' || q == '\'' {
				v = string(q) + redacted + string(q)
			}
			return sub[1] + sub[2] + v
		})
		s = reAuthHeader.ReplaceAllString(s, "${1}"+redacted)
	}
	s = reBearer.ReplaceAllString(s, "${1} "+redacted)
	s = reBasic.ReplaceAllStringFunc(s, func(m string) string {
		sub := reBasic.FindStringSubmatch(m)
		if !looksLikeBasicCredentials(sub[2]) {
			return m
		}
		return sub[1] + " " + redacted
	})
	return s
}

func looksLikeBasicCredentials(b64 string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if raw, err := enc.DecodeString(b64); err == nil && strings.Contains(string(raw), ":") {
			return true
		}
	}
	return false
}

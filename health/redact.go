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
	// user-info: user names leak more than one would think). Greedy up to
	// the last @ of the URL, so a password holding an @ is hidden whole.
	reURLUserinfo = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s"'<>]+@`)
	// user:pass@… without a scheme: the go-sql-driver/mysql DSN forms
	// (user:pass@tcp(host:3306)/db, user:pass@/db) and host:port forms.
	reDSNUserinfo = regexp.MustCompile(`(^|[\s"'=(/,])[^\s"'=():/@,]+:[^\s"'/]*@`)
	// key=value, key: value, "key":"value" and 'key': 'value' where the key
	// names a secret (password, passwd, pwd, pass, token, secret, api key,
	// private key, credentials), with any prefix or suffix (db_password,
	// access_token, X-Api-Key). The value may be quoted (with escapes), in
	// brackets (Go's %v of a header map), or bare.
	reKeyValue = regexp.MustCompile(`(?i)([a-z0-9_.-]*(?:password|passwd|pwd|pass|token|secret|api[_-]?key|private[_-]?key|credentials?)[a-z0-9_.-]*)` +
		`(["']?\s*[=:]\s*)` +
		`("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\[[^\]]*\]|[^\s&;,"'<>(){}\[\]]+)`)
	// Authorization: and Cookie: <anything to the end of the value>.
	reAuthHeader = regexp.MustCompile(`(?i)((?:proxy-)?authorization"?\s*[:=]\s*"?|(?:set-)?cookie"?\s*[:=]\s*"?)([^"\r\n]+)`)
	// Bearer <token> anywhere.
	reBearer = regexp.MustCompile(`(?i)\b(bearer)\s+([a-z0-9._~+/:-]+=*)`)
	// Basic <base64(user:pass)> anywhere; replaced only when the word
	// decodes to something with a colon, so "basic authentication failed"
	// keeps its words.
	reBasic = regexp.MustCompile(`(?i)\b(basic)\s+([a-z0-9+/]{4,}={0,2})`)
)

// Redact returns s with credentials replaced by "REDACTED". It is applied to
// every error, panic and gate text before that text reaches a response body
// or a log line, because probe bodies are read by people and tools outside
// the process: secrets never leave it.
//
// It replaces:
//   - URL user-info: "postgres://app:s3cret@db:5432/x" becomes
//     "postgres://REDACTED@db:5432/x", and user:password@ without a scheme
//     (the MySQL DSN forms "app:s3cret@tcp(db:3306)/x" and "app:s3cret@/x")
//     becomes "REDACTED@…";
//   - the value of a key=value, key: value or "key":"value" pair whose key
//     contains password, passwd, pwd, pass, token, secret, apikey, api_key,
//     api-key, private_key or credentials, in any case ("password=hunter2",
//     "Password:hunter2" from a %+v, "access_token=abc", "X-Api-Key: k",
//     "map[X-Api-Key:[k]]");
//   - the value of an Authorization, Proxy-Authorization, Cookie or
//     Set-Cookie header, to the end of the line or the closing quote;
//   - "Bearer <token>", and "Basic <credentials>" when the credentials are
//     base64 of "user:password".
//
// Redact errs on the side of hiding: a word that merely looks like a secret
// is hidden too. It does not find secrets that carry no marker (a bare
// password in free text); for those, set CheckerOptions.HideDetails. Redact is
// safe for concurrent use.
func Redact(s string) string {
	if s == "" {
		return s
	}
	if strings.Contains(s, "@") {
		s = reURLUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
		s = reDSNUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
	}
	if strings.ContainsAny(s, "=:") {
		s = reKeyValue.ReplaceAllStringFunc(s, func(m string) string {
			sub := reKeyValue.FindStringSubmatch(m)
			v := redacted
			switch q := sub[3][0]; q {
			case '"', '\'':
				v = string(q) + redacted + string(q)
			case '[':
				v = "[" + redacted + "]"
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

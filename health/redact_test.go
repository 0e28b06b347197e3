package health_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/lameduck/lameduck/health"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`dial postgres://app:s3cret@db:5432/test: refused`, `dial postgres://REDACTED@db:5432/test: refused`},
		{`Get "https://user@example.com/x": EOF`, `Get "https://REDACTED@example.com/x": EOF`},
		{`https://example.com/a@b stays`, `https://example.com/a@b stays`},
		{`open root:hunter2@tcp(127.0.0.1:3306)/test`, `open REDACTED@tcp(127.0.0.1:3306)/test`},
		{`host=db password=hunter2 sslmode=off`, `host=db password=REDACTED sslmode=off`},
		{`PASSWORD = "two words"`, `PASSWORD = "REDACTED"`},
		{`GET /v1?access_token=abc.def&x=1`, `GET /v1?access_token=REDACTED&x=1`},
		{`secret=xyz; apikey=k1, api_key=k2 X-Api-Key=k3`, `secret=REDACTED; apikey=REDACTED, api_key=REDACTED X-Api-Key=REDACTED`},
		{`{"token":"abc","user":"bob"}`, `{"token":"REDACTED","user":"bob"}`},
		{`client_secret='q w'`, `client_secret='REDACTED'`},
		{`Authorization: Bearer eyJhbGciOi.eyJzdWIi.sig`, `Authorization: REDACTED`},
		{`header "Authorization":"Basic YWxhZGRpbjpvcGVuc2VzYW1l"`, `header "Authorization":"REDACTED"`},
		{`sent bearer abc123== upstream`, `sent bearer REDACTED upstream`},
		{`sent Basic YWxhZGRpbjpvcGVuc2VzYW1l upstream`, `sent Basic REDACTED upstream`},
		{`basic authentication failed`, `basic authentication failed`},
		{`dial tcp 127.0.0.1:5432: connect: connection refused`, `dial tcp 127.0.0.1:5432: connect: connection refused`},
		{``, ``},
		// Shapes a hostile review found leaking.
		{`config {User:app Password:S3CRET Host:db}`, `config {User:app Password:REDACTED Host:db}`},
		{`headers map[X-Api-Key:[S3CRET] Accept:[*/*]]`, `headers map[X-Api-Key:[REDACTED] Accept:[*/*]]`},
		{`X-Api-Key: S3CRET`, `X-Api-Key: REDACTED`},
		{`password: S3CRET`, `password: REDACTED`},
		{`{'password': 'S3CRET'}`, `{'password': 'REDACTED'}`},
		{`{"password":"a\"S3CRET"}`, `{"password":"REDACTED"}`},
		{`open app:S3CRET@/orders`, `open REDACTED@/orders`},
		// Every key the documentation lists.
		{`host=db passwd=S3CRET user=app`, `host=db passwd=REDACTED user=app`},
		{`Server=db;Uid=app;Pwd=S3CRET;Database=orders`, `Server=db;Uid=app;Pwd=REDACTED;Database=orders`},
		{`db_pass=S3CRET`, `db_pass=REDACTED`},
		{`private_key=S3CRET`, `private_key=REDACTED`},
		{`credentials=S3CRET`, `credentials=REDACTED`},
		{`dial app:S3CRET@db:5432`, `dial REDACTED@db:5432`},
		{`redis://default:p@S3CRET@cache:6379`, `redis://REDACTED@cache:6379`},
		{`pass=S3CRET private_key=S3CRET credentials=S3CRET`, `pass=REDACTED private_key=REDACTED credentials=REDACTED`},
		{`Cookie: session=S3CRET; theme=dark`, `Cookie: REDACTED`},
		{`sent bearer abc:S3CRET upstream`, `sent bearer REDACTED upstream`},
	} {
		if got := health.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// Secrets never leave the process: error and panic text is redacted before
// any body, and stacks never reach one.
func TestSecretsNeverInBodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logBuf
		c := health.NewChecker(health.CheckerOptions{Logger: logs.logger()})
		mustAdd(t, c, health.Check{Name: "db", Func: func(context.Context) error {
			return errors.New(`dial postgres://app:pw-db@db/x password=pw-kv`)
		}})
		mustAdd(t, c, health.Check{Name: "api", Func: func(context.Context) error {
			panic("upstream rejected Authorization: Bearer pw-bearer")
		}})
		mustAdd(t, c, health.Check{Name: "long", Func: func(context.Context) error {
			return errors.New(strings.Repeat("é", 2000) + " token=pw-tail")
		}})
		info := &health.Info{Version: "v1", Commit: "c"}
		for _, req := range []struct{ target, accept string }{
			{"/readyz", ""}, {"/readyz?verbose", ""}, {"/readyz", health.MediaTypeHealthJSON},
		} {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("GET", req.target, nil)
			if req.accept != "" {
				r.Header.Set("Accept", req.accept)
			}
			c.ServeReadiness(rec, r, info, "", nil)
			body := rec.Body.String()
			for _, secret := range []string{"pw-db", "pw-kv", "pw-bearer", "pw-tail", "goroutine ", ".go:"} {
				if strings.Contains(body, secret) {
					t.Errorf("%s (%s): body has %q:\n%s", req.target, req.accept, secret, body)
				}
			}
			if !strings.Contains(body, "REDACTED") {
				t.Errorf("%s: nothing redacted? %s", req.target, body)
			}
			if len(body) > 4096 {
				t.Errorf("%s: body of %d bytes: a long error must be cut", req.target, len(body))
			}
		}
		synctest.Wait()
		for _, secret := range []string{"pw-db", "pw-kv", "pw-bearer"} {
			if strings.Contains(logs.String(), secret) {
				t.Errorf("log has %q", secret)
			}
		}
	})
}

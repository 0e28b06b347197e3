// Package ldmysql is a lameduck readiness check for MySQL and MariaDB
// through database/sql and go-sql-driver/mysql
// (github.com/go-sql-driver/mysql).
//
// Import it as
//
//	import ldmysql "github.com/lameduck/lameduck/contrib/mysql"
//
// It is a module of its own, so importing it pulls the MySQL driver and
// nothing else beyond lameduck's standard-library core. The operator's page
// is docs/mysql.md in the lameduck repository.
package ldmysql

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"

	"github.com/lameduck/lameduck/health"
)

// Check returns spec with its Func set to a ping of db, a pool opened with
// sql.Open("mysql", dsn): spec carries the name, Critical and Timeout (see
// health.Check), and any Func it holds is replaced. Register the result
// with Lifecycle.AddCheck.
//
// The ping is db.PingContext: it takes a connection from db's pool
// (database/sql dials only when no idle connection is left, never once per
// probe) and sends COM_PING under the probe's context. go-sql-driver/mysql
// watches the context and closes the connection when it ends, so a server
// that accepts and never answers is reported "timeout" at the check's
// deadline and the next probe pings afresh. Put timeout= (the dial
// timeout) in the DSN too, so a connect started for a probe that has left
// ends on its own.
//
// Errors: "lameduck: mysql ping: " and the driver's error, with the user of
// the server's "Access denied for user 'NAME'@'HOST'" replaced by
// REDACTED; the health engine also redacts the usual credential shapes
// (user:password@tcp(...)) before a body shows it. A nil db makes every
// call return an error saying so. Safe for concurrent use, as db is.
func Check(spec health.Check, db *sql.DB) health.Check {
	if db == nil {
		err := fmt.Errorf("lameduck: ldmysql.Check(%q): the *sql.DB is nil; pass the pool the application uses", spec.Name)
		spec.Func = func(context.Context) error { return err }
		return spec
	}
	spec.Func = func(ctx context.Context) error {
		if err := db.PingContext(ctx); err != nil {
			return &pingError{err}
		}
		return nil
	}
	return spec
}

// reUser matches the account in MySQL's and MariaDB's access-denied
// messages: for user 'app'@'10.0.0.7'.
var reUser = regexp.MustCompile(`for user '[^']*'(@'[^']*')?`)

// pingError is a ping's error with the account cut out of its text. It
// wraps the driver's error, so errors.Is and errors.As (*mysql.MySQLError,
// context.DeadlineExceeded) still see it.
type pingError struct{ err error }

func (e *pingError) Error() string {
	return "lameduck: mysql ping: " + reUser.ReplaceAllString(e.err.Error(), "for user REDACTED")
}

func (e *pingError) Unwrap() error { return e.err }

// Package integration holds lameduck's integration tests against the real
// servers this machine runs (PostgreSQL, MariaDB): the stdlib checks of
// package checks, wired into a Lifecycle's /readyz, pinging real databases
// through real drivers. It is a module of its own so that the drivers never
// enter the core module's go.mod.
//
// The servers are found through LAMEDUCK_TEST_POSTGRES_DSN and
// LAMEDUCK_TEST_MARIADB_DSN, defaulting to
// PostgreSQL at 127.0.0.1:5432 and MariaDB at 127.0.0.1:3306, database test. A
// missing server skips its test, except when CI is set: then the test fails
// and says which server is missing and how to start it.
package integration

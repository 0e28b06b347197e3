// Regression test, kept from a hostile review's reproduction, which failed before the fix it names
// below; it passes now. The original text follows.
//
// Reproduction: ldpgx.Source cannot claim on a pool whose connections use
// pgx's exec or simple-protocol query modes (default_query_exec_mode=exec or
// simple_protocol, the settings PgBouncer-in-transaction-mode users set, and
// docs/postgres.md names such a pooler as supported): the claim passes its
// token as a [16]byte, which pgx can only encode when it knows the parameter
// is a uuid (from a prepared statement's description). Every Fetch fails with
// "unable to encode [16]uint8{...} into text format for unknown type (OID
// 0)": the runner never consumes (the loop keeps cycling, so liveness stays
// 200 and the failure shows only as a fetch warning). Pass the token as a
// string or a pgtype.UUID.
//
// Copy to: contrib/pgx/zz_hostile_execmode/execmode_test.go in a clone
// (package zzhostileexecmode_test). Needs PostgreSQL at 127.0.0.1:5432.
// Run:     cd contrib/pgx && go test -count=1 -run TestHostileExecMode -v ./zz_hostile_execmode/
//
// On the current code it prints (FAIL):
//
//	execmode_test.go:NN: exec: Fetch: lameduck: ldpgx: fetching from hostile_exec_NNN: claiming: failed to encode args[0]:
//	  unable to encode [16]uint8{...} into text format for unknown type (OID 0): cannot find encode plan
//	execmode_test.go:NN: simple_protocol: Fetch: ... (same)
//
// Fixed: both modes claim the job: PASS.
package execmode_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	ldpgx "github.com/lameduck/lameduck/contrib/pgx"
)

func TestHostileExecMode(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"exec", "simple_protocol"} {
		pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&default_query_exec_mode="+mode)
		if err != nil {
			t.Fatal(err)
		}
		table := fmt.Sprintf("hostile_exec_%d_%s", os.Getpid(), mode)
		if err := ldpgx.CreateTable(ctx, pool, table); err != nil {
			t.Fatalf("%s: CreateTable: %v", mode, err)
		}
		if err := ldpgx.Enqueue(ctx, pool, table, ldpgx.EnqueueJob{Key: "j1"}); err != nil {
			t.Errorf("%s: Enqueue: %v", mode, err)
		}
		src, _ := ldpgx.NewSource(pool, ldpgx.SourceConfig{Table: table, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		j, err := src.Fetch(ctx, time.Second)
		if err != nil {
			t.Errorf("%s: Fetch: %v", mode, err)
		} else if j == nil {
			t.Errorf("%s: Fetch returned no job", mode)
		} else if err := j.Ack(ctx); err != nil {
			t.Errorf("%s: Ack: %v", mode, err)
		}
		_ = src.Drain(ctx)
		pool.Exec(ctx, "DROP TABLE IF EXISTS "+table)
		pool.Close()
	}
}

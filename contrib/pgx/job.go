package ldpgx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lameduck/lameduck/worker"
)

// ErrClaimLost is what a [Job]'s Ack and HandBack wrap when the job's
// claim is no longer this runner's: its lease ended (the renewals failed,
// or the process stalled for longer than the lease) and another runner
// claimed it, or the row was handed back, dead-lettered or deleted by
// someone else. The statement changed nothing; the error says where the
// job is now.
var ErrClaimLost = errors.New("ldpgx: the job's claim is no longer this runner's")

// Job is one job claimed by a [Source]: a [worker.Job] and a
// [worker.Delivered]. Ack deletes its row, HandBack returns it to the
// table; a consume loop calls exactly one of them, once. Until then the
// Source renews its lease (see Source); code that uses a Source outside a
// worker must settle every job, or its renewals go on.
//
// Its methods are safe for concurrent use.
type Job struct {
	src         *Source  // immutable
	row         int64    // immutable
	key         string   // immutable
	payload     []byte   // immutable
	attempts    int      // immutable: counted at this claim
	maxAttempts int      // immutable
	token       [16]byte // immutable: this claim's
	id          string   // immutable

	stop chan struct{} // closed when the job is settled
	kept chan struct{} // closed when the renewals have stopped
	once sync.Once     // closes stop

	mu         sync.Mutex
	leaseUntil time.Time // guarded by mu: the lease's end as PostgreSQL last set it
}

func (s *Source) newJob(r claimedRow, token [16]byte, sent, leaseUntil time.Time) *Job {
	j := &Job{src: s, row: r.row, key: r.key, payload: r.payload, attempts: r.attempts, maxAttempts: r.maxAttempts,
		token: token, stop: make(chan struct{}), kept: make(chan struct{}), leaseUntil: leaseUntil}
	j.id = s.jobID(j)
	go j.keepLease(sent) // joined by settle
	return j
}

// jobID calls SourceConfig.ID, recovering a panic as "".
func (s *Source) jobID(j *Job) (id string) {
	if s.id == nil {
		return nameOf(j.key, j.row)
	}
	defer func() {
		if v := recover(); v != nil {
			s.log.Error(fmt.Sprintf("lameduck: ldpgx: SourceConfig.ID panicked: %v; the job is named by the loop", v), "row", j.row)
			id = ""
		}
	}()
	return s.id(j)
}

// ID is the job's name (see SourceConfig.ID).
func (j *Job) ID() string { return j.id }

// Key is the key the producer gave the job ([EnqueueJob].Key); empty when
// none.
func (j *Job) Key() string { return j.key }

// Payload is the job's data, as its row holds it.
func (j *Job) Payload() []byte { return j.payload }

// Row is the job's id in the table.
func (j *Job) Row() int64 { return j.row }

// Delivery is the job's attempts, this delivery included (1 the first
// time): a [worker.Delivered]. A delivery whose runner handed it back for
// its own reason (a drain, the drain bound) is not counted; one whose
// runner died is.
func (j *Job) Delivery() int { return j.attempts }

// MaxAttempts is how many deliveries the job may fail before it moves to
// the dead state.
func (j *Job) MaxAttempts() int { return j.maxAttempts }

// LastAttempt reports whether a failure now moves the job to the dead
// state (Delivery ≥ MaxAttempts). A handler may use it to record a job
// about to fail for good.
func (j *Job) LastAttempt() bool { return j.attempts >= j.maxAttempts }

// LeaseUntil is when the job's lease ends unless renewed, as PostgreSQL
// last set it (its clock).
func (j *Job) LeaseUntil() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.leaseUntil
}

// keepLease renews the lease every third of it, counted from the claim's
// sending, until the job is settled or a renewal finds the claim gone. A
// failed renewal is retried after a second (or the interval, if shorter)
// and logged once; a success after failures is logged too.
func (j *Job) keepLease(sent time.Time) {
	defer close(j.kept)
	s := j.src
	t := time.NewTimer(time.Until(sent.Add(s.every)))
	defer t.Stop()
	failing := false
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
		until, err := j.renew()
		next := s.every
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			s.log.Error(fmt.Sprintf("lameduck: ldpgx: job %s was taken away: renewing its lease found its claim gone (%s); it may run twice (at least once), and its Ack or HandBack will fail",
				j.id, j.whereIs()), "table", s.t.name, "row", j.row, "lease_until", j.LeaseUntil().Format(time.RFC3339Nano))
			return
		case err != nil:
			next = min(s.every, time.Second)
			if !failing {
				failing = true
				s.log.Warn(fmt.Sprintf("lameduck: ldpgx: renewing job %s's lease failed; retrying every %s: unless a renewal succeeds, another runner may claim it from %s",
					j.id, next, j.LeaseUntil().Format(time.RFC3339Nano)), "table", s.t.name, "row", j.row, "error", err.Error())
			}
		default:
			j.mu.Lock()
			j.leaseUntil = until
			j.mu.Unlock()
			if failing {
				failing = false
				s.log.Info(fmt.Sprintf("lameduck: ldpgx: renewing job %s's lease works again", j.id),
					"table", s.t.name, "row", j.row, "lease_until", until.Format(time.RFC3339Nano))
			}
		}
		t.Reset(next)
	}
}

// renew runs one renewal, bounded by ClaimTimeout; pgx.ErrNoRows means
// the claim is gone.
func (j *Job) renew() (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), j.src.claimTimeout)
	defer cancel()
	var until time.Time
	err := j.src.pool.QueryRow(ctx, j.src.sql.renew, j.row, tokenText(j.token), j.src.lease.Microseconds()).Scan(&until)
	return until, err
}

// settle stops the renewals and waits until none can follow (a renewal
// under way finishes first, within ClaimTimeout).
func (j *Job) settle() {
	j.once.Do(func() { close(j.stop) })
	<-j.kept
}

// Ack stops the job's lease renewals and deletes its row, where the claim
// token is still this delivery's, so a job reported done is not delivered
// again. The statement is bounded by ctx and by 5s in all, and tried
// again on another connection while one breaks under it; a row found
// gone after a try whose answer was lost counts as acknowledged. It returns:
//
//   - nil once PostgreSQL has committed the delete;
//   - an error wrapping [ErrClaimLost] when the token no longer matches
//     (the job was taken away: the error says where it is now); nothing
//     was deleted;
//   - otherwise pgx's error: the job comes back when its lease ends (the
//     error names the time), and may run again (at least once).
func (j *Job) Ack(ctx context.Context) error {
	j.settle()
	tag, ambiguous, err := j.exec(ctx, j.src.sql.ack, j.row, tokenText(j.token))
	switch {
	case err != nil:
		return fmt.Errorf("lameduck: ldpgx: acknowledging job %s (row %d of %s): %w; PostgreSQL delivers it again when its lease ends, at %s",
			j.id, j.row, j.src.t.name, err, j.LeaseUntil().Format(time.RFC3339Nano))
	case tag.RowsAffected() == 1:
		return nil
	}
	where, state := j.lookup()
	if ambiguous && state == "" {
		return nil // the first try's delete, whose answer was lost
	}
	return fmt.Errorf("lameduck: ldpgx: acknowledging job %s (row %d of %s): %w: %s; nothing was deleted",
		j.id, j.row, j.src.t.name, ErrClaimLost, where)
}

// HandBack stops the job's lease renewals and returns the job to the
// table, due after delay (run_at = now() + delay; zero or negative: at
// once), where the claim token is still this delivery's; it returns once
// PostgreSQL has committed it, so a process that exits next cannot strand
// the job. The table's trigger notifies the runners waiting. The
// statement is bounded by ctx and by 5s in all, and tried again on another
// connection while one breaks under it. [worker.HandBackCause](ctx) says why
// (docs/postgres.md, "What happens to a job"):
//
//   - nil, the job's own failure: the attempt counted at the claim stays
//     counted; at the job's last attempt (Delivery ≥ MaxAttempts) the job
//     moves to the dead state instead, never delivered again (the
//     dead-letter of this queue; the Source's log says so);
//   - the runner's own reason (a drain, the drain bound, an interrupt, a
//     superseded epoch, the process exiting): the attempt is refunded
//     (attempts is back to what it was before this claim), and the job is
//     never dead-lettered, even at its last attempt.
//
// It returns nil once the job is back (or dead); an error wrapping
// [ErrClaimLost] when the token no longer matches (the error says where
// the job is now; nothing changed); otherwise pgx's error, with what
// PostgreSQL does with the job now: it comes back when its lease ends (at
// the time the error names), that attempt counted.
func (j *Job) HandBack(ctx context.Context, delay time.Duration) error {
	j.settle()
	delay = max(delay, 0)
	cause := worker.HandBackCause(ctx)
	sql := j.src.sql.fail
	if cause != nil {
		sql = j.src.sql.giveBack
	}
	var (
		state              string
		attempts, maxTries int
	)
	ambiguous, err := j.queryRow(ctx, sql, []any{j.row, tokenText(j.token), delay.Microseconds()}, &state, &attempts, &maxTries)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		where, state := j.lookup()
		if ambiguous && (state == "ready" || state == "running" || state == "dead") {
			return nil // the first try's hand-back, whose answer was lost
		}
		return fmt.Errorf("lameduck: ldpgx: handing back job %s (row %d of %s): %w: %s; nothing changed",
			j.id, j.row, j.src.t.name, ErrClaimLost, where)
	case err != nil:
		return fmt.Errorf("lameduck: ldpgx: handing back job %s (row %d of %s): %w; PostgreSQL delivers it again when its lease ends, at %s, that attempt counted",
			j.id, j.row, j.src.t.name, err, j.LeaseUntil().Format(time.RFC3339Nano))
	}
	if state == "dead" {
		j.src.log.Warn(fmt.Sprintf("lameduck: ldpgx: job %s failed its last attempt (%d of max_attempts %d): moved to the dead state; it is not delivered again",
			j.id, attempts, maxTries), "table", j.src.t.name, "row", j.row)
	}
	return nil
}

// exec runs a settling statement (see tries).
func (j *Job) exec(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, ambiguous bool, err error) {
	ambiguous, err = tries(ctx, func(ctx context.Context) error {
		tag, err = j.src.pool.Exec(ctx, sql, args...)
		return err
	})
	return tag, ambiguous, err
}

// queryRow is exec for a statement that returns one row, scanned into
// dest; pgx.ErrNoRows when none.
func (j *Job) queryRow(ctx context.Context, sql string, args []any, dest ...any) (ambiguous bool, err error) {
	return tries(ctx, func(ctx context.Context) error {
		return j.src.pool.QueryRow(ctx, sql, args...).Scan(dest...)
	})
}

// tries runs a settling statement, fn, until PostgreSQL answers it (with
// a result or an error of its own), within ctx and settleTimeout in all:
// a connection found broken (the pool may hold several that a network cut
// broke at once) is followed by another, after a pause of 20ms doubling up
// to 500ms. ambiguous reports that a failed try was sent and may have
// committed (its answer was lost): a later try finding nothing to change
// may be finding its work done.
func tries(ctx context.Context, fn func(context.Context) error) (ambiguous bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	pause := 20 * time.Millisecond
	for {
		err = fn(ctx)
		if err == nil || errors.Is(err, pgx.ErrNoRows) || !retryable(err) || ctx.Err() != nil {
			return ambiguous, err
		}
		ambiguous = ambiguous || !pgconn.SafeToRetry(err)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ambiguous, err
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// retryable reports whether a settling statement that failed with err may
// be tried again: PostgreSQL did not answer it with an error of its own
// (a broken connection, an answer lost), or said the connection was
// terminated under it.
func retryable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03" // admin_shutdown, crash_shutdown, cannot_connect_now
	}
	return true
}

// lookup describes where the job is now, for an error or a log line, and
// returns its row's state: "" when the row is gone, "?" when the lookup
// failed.
func (j *Job) lookup() (where, state string) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var (
		ours               bool
		attempts, maxTries int
		next               time.Time
	)
	err := j.src.pool.QueryRow(ctx, j.src.sql.lookup, j.row, tokenText(j.token)).Scan(&state, &ours, &attempts, &maxTries, &next)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "its row is gone (acknowledged by a runner that claimed it after this one's lease ended, or deleted)", ""
	case err != nil:
		return fmt.Sprintf("looking the row up failed (%v)", err), "?"
	case state == "running" && ours:
		return fmt.Sprintf("it is still claimed by this delivery (attempt %d of %d, lease until %s)", attempts, maxTries, next.Format(time.RFC3339Nano)), state
	case state == "running":
		return fmt.Sprintf("another runner claimed it after this delivery's lease ended at %s, and holds it now (attempt %d of %d, lease until %s)",
			j.LeaseUntil().Format(time.RFC3339Nano), attempts, maxTries, next.Format(time.RFC3339Nano)), state
	case state == "ready":
		return fmt.Sprintf("it is ready again, due %s, attempts %d of %d (handed back by a runner that claimed it after this delivery's lease ended, or released by hand)",
			next.Format(time.RFC3339Nano), attempts, maxTries), state
	default:
		return fmt.Sprintf("it is %s, attempts %d of %d", state, attempts, maxTries), state
	}
}

// whereIs is lookup's description alone.
func (j *Job) whereIs() string {
	where, _ := j.lookup()
	return where
}

package ldpgx

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lameduck/lameduck/worker"
)

// Defaults of a [SourceConfig].
const (
	// DefaultLease is how long a claim holds a job before another runner
	// may claim it, unless renewed: 30s.
	DefaultLease = 30 * time.Second
	// DefaultClaimTimeout bounds a claim statement: 5s, or half the lease
	// when that is shorter.
	DefaultClaimTimeout = 5 * time.Second
	// DefaultPoll is how often a waiting Fetch claims without having been
	// notified: 2s.
	DefaultPoll = 2 * time.Second
	// MinLease is the shortest lease a SourceConfig accepts: 1s. A lease
	// is renewed every third of itself, and PostgreSQL stores time to the
	// microsecond, but a renewal must also get through a busy pool and a
	// network's round trip.
	MinLease = time.Second
)

// settleTimeout bounds an Ack or a HandBack: its statement's tries in all.
const settleTimeout = 5 * time.Second

// claimTries is how many connections a claim tries while it finds them
// broken before sending anything.
const claimTries = 4

// SourceConfig configures a [Source]. The zero value is usable: it reads
// the table lameduck_jobs with a 30s lease.
type SourceConfig struct {
	// Table is the jobs table, "name" or "schema.name", each part taken
	// literally (quoted: Jobs and jobs are two tables), made by
	// [CreateTable]. Empty means DefaultTable (lameduck_jobs, in the
	// search_path's first schema). A name with more than one dot, an
	// empty part, a schema longer than 63 bytes or a name longer than 54
	// is an error.
	Table string
	// Lease, a time.Duration, is how long a claim holds a job: the Source
	// renews it every third of itself while the job runs, however long it
	// runs, so it bounds only how long a job whose runner died (SIGKILL, a
	// lost node, a connection cut off) waits before another runner may
	// claim it again (docs/postgres.md, "The claim, the lease and the
	// claim token"). Zero means
	// DefaultLease (30s); negative, or under MinLease (1s), is an error.
	Lease time.Duration
	// ClaimTimeout, a time.Duration, bounds one claim statement, which runs
	// under a context of its own that the loop's cannot cut: a claim whose
	// answer does not come within it is given up (Fetch returns an error
	// wrapping worker.ErrNoReply), and if PostgreSQL ran it anyway its job
	// is released by the next Fetch or the Drain, or at worst comes back
	// when its lease expires. It also bounds each lease renewal. Zero
	// means DefaultClaimTimeout (5s) or half the Lease, whichever is
	// shorter; negative, or more than half the Lease (a claim answered
	// that late could find its lease already spent), is an error.
	ClaimTimeout time.Duration
	// Poll, a time.Duration, is how often a waiting Fetch claims although
	// it was not notified: the fallback for notifications lost (the
	// listening connection down, a pooler in transaction mode that does
	// not carry LISTEN). A Fetch that finds no job also waits no longer
	// than until the earliest delayed job is due or lease expires. Zero
	// means DefaultPoll (2s); negative is an error.
	Poll time.Duration
	// ID names a job in the runner's logs and probe bodies. Nil means the
	// row's key, or "row-<id>" when the key is empty. It is called once
	// per delivery, from Fetch; a panic in it is recovered as "".
	ID func(j *Job) string
	// Logger receives what the runner's own log cannot know: a lease
	// renewal that failed or found the job taken away, the listening
	// connection lost and back, a job dead-lettered at its claim, a claim
	// whose answer was lost released. Nil means slog.Default().
	Logger *slog.Logger
}

// Source is a [worker.Source] on a PostgreSQL jobs table (see
// [CreateTable]), through a pgx pool: give it to a [worker.Loop]. Each
// Fetch claims at most one job, the job it returns is a [*Job], and its
// Drain (it is a [worker.Drainer]) releases what the Source holds.
//
// A claim is one statement: the row due first (by next_at, then id) that
// no other transaction has locked (FOR UPDATE SKIP LOCKED) is set
// running, its attempts counted, under a lease (lease_until) and a claim
// token of this delivery's own; no two runners ever hold a job at once
// while its lease runs. While a job is in flight (from Fetch until its
// Ack or HandBack) the Source renews its lease every third of the lease,
// however long it runs, so the handler needs no keep-alive of its own. A
// renewal that finds the token gone (the lease had ended and another
// runner claimed the job, say) is logged as such: the job may now run
// twice, and its Ack or HandBack returns an error wrapping [ErrClaimLost].
// A job whose runner died comes back when its lease ends, its attempt
// counted (docs/postgres.md, "What happens to a job").
//
// Fetch waits for a job with LISTEN on the table's channel (the table's
// trigger notifies it), on a connection of its own, taken from the pool
// (so made with the pool's configuration and hooks) and kept out of it
// for good: the first Fetch starts that listener, one goroutine, which
// Drain ends. Should it be down, Fetch claims every Poll.
//
// Size the pool for the loops: a claim, a renewal and a settlement each
// hold one of its connections for one statement, besides what the
// handlers use.
//
// Create one with [NewSource]; the zero value is not usable. A Source is
// safe for concurrent use: several loops may share one (n loops, n jobs
// at once).
type Source struct {
	pool         *pgxpool.Pool     // immutable
	t            table             // immutable
	lease        time.Duration     // immutable
	every        time.Duration     // immutable: lease / 3, the renewal interval
	claimTimeout time.Duration     // immutable
	poll         time.Duration     // immutable
	id           func(*Job) string // immutable; may be nil
	log          *slog.Logger      // immutable
	sql          statements        // immutable

	mu       sync.Mutex
	lis      *listener     // guarded by mu: started by a Fetch, ended by Drain; nil before and after
	orphans  []orphan      // guarded by mu: claims whose answer was lost, to release
	claiming int           // guarded by mu: claim statements running
	claimed  chan struct{} // guarded by mu: closed when claiming falls to 0; nil while none ran since
}

// orphan is a claim whose answer never came: if PostgreSQL ran it, its row
// is running under this token, and no runner has it.
type orphan struct {
	token [16]byte
	sent  time.Time
}

// statements are a Source's SQL, built once for its table.
type statements struct {
	claim, next, renew, ack, fail, giveBack, release, lookup, channel string
}

func buildStatements(t table) statements {
	q := t.quoted
	return statements{
		// The claim: one statement, so that it is all or nothing. A row
		// whose attempts are spent (its last lease expired: the runner
		// holding it died) goes to the dead state instead of running.
		claim: fmt.Sprintf(`UPDATE %[1]s SET
	state       = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'running' END,
	attempts    = CASE WHEN attempts >= max_attempts THEN attempts ELSE attempts + 1 END,
	claim       = CASE WHEN attempts >= max_attempts THEN NULL ELSE $1::uuid END,
	lease_until = CASE WHEN attempts >= max_attempts THEN NULL ELSE now() + $2 * interval '1 microsecond' END
WHERE id = (
	SELECT id FROM %[1]s WHERE state <> 'dead' AND next_at <= now()
	ORDER BY next_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, key, payload, state, attempts, max_attempts, lease_until`, q),
		next: fmt.Sprintf(`SELECT extract(epoch FROM min(next_at) - now())::float8 FROM %s WHERE state <> 'dead'`, q),
		renew: fmt.Sprintf(`UPDATE %s SET lease_until = now() + $3 * interval '1 microsecond'
WHERE id = $1 AND claim = $2::uuid RETURNING lease_until`, q),
		ack: fmt.Sprintf(`DELETE FROM %s WHERE id = $1 AND claim = $2::uuid`, q),
		// A failure: the attempt, counted at the claim, stays counted; the
		// last one moves the job to the dead state.
		fail: fmt.Sprintf(`UPDATE %s SET
	state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
	run_at = now() + $3 * interval '1 microsecond', claim = NULL, lease_until = NULL
WHERE id = $1 AND claim = $2::uuid RETURNING state, attempts, max_attempts`, q),
		// The runner's own reason: the attempt is refunded, and the job is
		// never dead-lettered.
		giveBack: fmt.Sprintf(`UPDATE %s SET
	state = 'ready', attempts = greatest(attempts - 1, 0),
	run_at = now() + $3 * interval '1 microsecond', claim = NULL, lease_until = NULL
WHERE id = $1 AND claim = $2::uuid RETURNING state, attempts, max_attempts`, q),
		release: fmt.Sprintf(`UPDATE %s SET
	state = 'ready', attempts = greatest(attempts - 1, 0), run_at = now(), claim = NULL, lease_until = NULL
WHERE claim = ANY($1::uuid[]) AND state = 'running' RETURNING id, coalesce(key, '')`, q),
		lookup: fmt.Sprintf(`SELECT state, claim IS NOT DISTINCT FROM $2::uuid, attempts, max_attempts, next_at FROM %s WHERE id = $1`, q),
		channel: `SELECT ` + fmt.Sprintf(channelSQL, "n.nspname", "c.relname") + `
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
	}
}

// NewSource returns a Source on the jobs table of cfg in the database of
// pool. It does no I/O, and starts nothing: the first Fetch starts the
// listener. It returns an error, naming the setting, its value and the
// fix, for a nil pool or a malformed setting (see SourceConfig); it does
// not check that the table exists (Fetch's error says so, with the fix).
func NewSource(pool *pgxpool.Pool, cfg SourceConfig) (*Source, error) {
	if pool == nil {
		return nil, errors.New("lameduck: ldpgx.NewSource: the pool is nil; pass the *pgxpool.Pool of the jobs' database")
	}
	t, err := parseTable("SourceConfig.Table", cfg.Table)
	if err != nil {
		return nil, err
	}
	lease := cfg.Lease
	switch {
	case lease == 0:
		lease = DefaultLease
	case lease < 0:
		return nil, fmt.Errorf("lameduck: ldpgx: SourceConfig.Lease=%s is negative; use 0 for %s, or a duration of at least %s", lease, DefaultLease, MinLease)
	case lease < MinLease:
		return nil, fmt.Errorf("lameduck: ldpgx: SourceConfig.Lease=%s is under %s (it is renewed every third of itself); use 0 for %s, or at least %s", lease, MinLease, DefaultLease, MinLease)
	}
	claimTimeout := cfg.ClaimTimeout
	switch {
	case claimTimeout == 0:
		claimTimeout = min(DefaultClaimTimeout, lease/2)
	case claimTimeout < 0:
		return nil, fmt.Errorf("lameduck: ldpgx: SourceConfig.ClaimTimeout=%s is negative; use 0 for min(%s, Lease/2)", claimTimeout, DefaultClaimTimeout)
	case claimTimeout > lease/2:
		return nil, fmt.Errorf("lameduck: ldpgx: SourceConfig.ClaimTimeout=%s is more than half the Lease %s (a claim answered that late could find its lease spent); use at most %s, or raise the Lease", claimTimeout, lease, lease/2)
	}
	poll := cfg.Poll
	switch {
	case poll == 0:
		poll = DefaultPoll
	case poll < 0:
		return nil, fmt.Errorf("lameduck: ldpgx: SourceConfig.Poll=%s is negative; use 0 for %s", poll, DefaultPoll)
	}
	s := &Source{pool: pool, t: t, lease: lease, every: lease / 3, claimTimeout: claimTimeout, poll: poll,
		id: cfg.ID, log: cfg.Logger, sql: buildStatements(t)}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// Lease is the lease a claim takes, resolved (SourceConfig.Lease or
// DefaultLease); a job in flight has it renewed every third of it.
func (s *Source) Lease() time.Duration { return s.lease }

// Fetch claims one job, waiting up to wait for one to be due, and returns
// it as a [*Job], its lease renewals started. In order:
//
//  1. it starts the listener, unless it runs, and releases the claims of
//     earlier Fetches whose answer was lost, if any (see
//     SourceConfig.ClaimTimeout);
//  2. it claims (one statement, under a context of its own bounded by
//     ClaimTimeout: ctx ending does not cut it, and a row it returns is
//     always returned); a job is returned at once;
//  3. finding none, it calls worker.Consuming(ctx) once the listener is
//     listening, and waits: for a notification on the table's channel
//     (an insert or a hand-back), for the earliest delayed job or lease
//     expiry, or Poll, whichever comes first, and claims again; until
//     wait has passed since the call.
//
// It returns the job; (nil, nil) when no job was due within wait (an
// idle cycle of the loop), at once when ctx has already ended (claiming
// nothing), and as soon as ctx ends or the runner stops asking for jobs
// ([worker.Stopping]: the drain began) while it waits between claims; an
// error wrapping [worker.ErrNoReply] when a claim got no answer
// within ClaimTimeout (PostgreSQL or the network went silent); otherwise
// an error naming the table and pgx's error (the table does not exist,
// the server refuses connections, the pool had no connection free within
// ClaimTimeout: the error names MaxConns). A row claimed whose attempts were spent
// (its last lease expired) is moved to the dead state, logged, and not
// returned. Fetch does not retry after an error; the loop does.
func (s *Source) Fetch(ctx context.Context, wait time.Duration) (worker.Job, error) {
	if ctx.Err() != nil {
		return nil, nil // the process is exiting: claim nothing it would only hand back
	}
	deadline := time.Now().Add(max(wait, 0))
	lis := s.listener()
	if s.hasOrphans() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.claimTimeout)
		_ = s.releaseOrphans(rctx) // kept for the next Fetch, or the Drain, on an error
		cancel()
	}
	// Between two claims no request is outstanding (a claim is one
	// statement, answered before the next), so the wait ends when the
	// runner stops asking: the drain does not wait out FetchWait.
	stopping := worker.Stopping(ctx)
	said := false
	for {
		wake := lis.wakeup() // taken before the claim: what is notified from now on ends the wait
		began := time.Now()
		j, err := s.claim(ctx)
		rt := time.Since(began)
		switch {
		case errors.Is(err, errDead):
			continue // progress: claim the next row at once
		case err != nil:
			return nil, err
		case j != nil:
			return j, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		d := min(left, s.poll)
		if left > rt { // time for the question: ask when the next row is due
			if next, ok := s.nextDue(ctx); ok && next > 0 {
				d = min(d, next)
			}
			if left = time.Until(deadline); left <= 0 {
				return nil, nil
			}
			d = min(d, left)
		}
		timer := time.NewTimer(d)
	waiting:
		for {
			var up <-chan struct{}
			if !said {
				up = lis.listening()
			}
			select {
			case <-up:
				said = true
				worker.Consuming(ctx)
			case <-wake:
				break waiting
			case <-timer.C:
				break waiting
			case <-stopping: // the drain began; nothing is outstanding between claims
				timer.Stop()
				return nil, nil
			case <-ctx.Done():
				timer.Stop()
				return nil, nil
			}
		}
		timer.Stop()
	}
}

// errDead is claim's word that the row it claimed went to the dead state.
var errDead = errors.New("ldpgx: the claimed row was dead-lettered")

// claim runs the claim statement once. It returns the job, (nil, nil)
// when no row was due, errDead when the row it took had its attempts
// spent, or an error.
func (s *Source) claim(ctx context.Context) (*Job, error) {
	var token [16]byte
	_, _ = rand.Read(token[:]) // never fails (crypto/rand's contract)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.claimTimeout)
	defer cancel()
	s.claimBegins()
	defer s.claimEnds()
	sent := time.Now()
	var (
		r          claimedRow
		key        *string
		leaseUntil *time.Time // NULL for a row dead-lettered at its claim
		err        error
	)
	for try := 1; ; try++ {
		var conn *pgxpool.Conn
		if conn, err = s.pool.Acquire(cctx); err != nil {
			return nil, s.claimError(acquiring, err, cctx)
		}
		err = conn.QueryRow(cctx, s.sql.claim, tokenText(token), s.lease.Microseconds()).
			Scan(&r.row, &key, &r.payload, &r.state, &r.attempts, &r.maxAttempts, &leaseUntil)
		conn.Release()
		if err == nil || !brokenBefore(err) || try == claimTries || cctx.Err() != nil {
			break
		}
		// The claim did not run: its connection was found broken (a
		// network cut, or a server restart, breaks every idle one of the
		// pool at once). Another one.
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		if !settled(err) {
			s.addOrphan(orphan{token: token, sent: sent})
		}
		return nil, s.claimError("claiming", err, cctx)
	}
	if key != nil {
		r.key = *key
	}
	if r.state == "dead" {
		s.log.Warn(fmt.Sprintf("lameduck: ldpgx: job %s dead-lettered at its claim: its lease expired during its last attempt (%d of max_attempts %d), so the runner that held it stopped renewing (killed, or cut off from PostgreSQL); it is not delivered again",
			nameOf(r.key, r.row), r.attempts, r.maxAttempts), "table", s.t.name, "row", r.row)
		return nil, errDead
	}
	return s.newJob(r, token, sent, *leaseUntil), nil
}

// claimedRow is what a claim returns.
type claimedRow struct {
	row                   int64
	key, state            string
	payload               []byte
	attempts, maxAttempts int
}

// nameOf is a job's default name: its key, or row-<id>.
func nameOf(key string, row int64) string {
	if key != "" {
		return key
	}
	return "row-" + strconv.FormatInt(row, 10)
}

// settled reports whether a statement that failed with err certainly did
// not commit: PostgreSQL answered with an error (the implicit transaction
// rolled back), or nothing was sent.
func settled(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) || pgconn.SafeToRetry(err)
}

// brokenBefore reports whether a statement that failed with err never
// ran because its connection was broken before: nothing was sent, or
// PostgreSQL had ended the session (admin_shutdown, crash_shutdown: a
// terminated backend, a server stopping) and said so instead.
func brokenBefore(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "57P01" || pg.Code == "57P02"
	}
	return pgconn.SafeToRetry(err)
}

// acquiring is what a claim does until the pool gives it a connection.
const acquiring = "acquiring a connection from the pool"

// claimError is Fetch's error for a claim that failed while doing what.
func (s *Source) claimError(doing string, err error, cctx context.Context) error {
	if st := s.pool.Stat(); doing == acquiring && errors.Is(cctx.Err(), context.DeadlineExceeded) && st.AcquiredConns() >= st.MaxConns() {
		// Not silence: the pool had no connection to give.
		return fmt.Errorf("lameduck: ldpgx: fetching from %s: %s: no connection was free for ClaimTimeout %s (MaxConns %d, all in use); raise the pool's MaxConns (pool_max_conns) to the loops, plus two, plus what the handlers hold: %w",
			s.t.name, doing, s.claimTimeout, st.MaxConns(), err)
	}
	if errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("lameduck: ldpgx: fetching from %s: %s: no answer within ClaimTimeout %s (if PostgreSQL ran the claim, its job is released by the next Fetch or at the latest when its lease ends): %w: %w",
			s.t.name, doing, s.claimTimeout, worker.ErrNoReply, err)
	}
	return fmt.Errorf("lameduck: ldpgx: fetching from %s: %s: %w%s", s.t.name, doing, err, missingTable(err))
}

// nextDue asks how long until the earliest row not dead is due (a delayed
// job) or its lease ends, bounded by ClaimTimeout; ok is false when no
// such row exists, or the question failed (the caller then waits Poll). It
// is a read: cutting it changes nothing.
func (s *Source) nextDue(ctx context.Context) (time.Duration, bool) {
	qctx, cancel := context.WithTimeout(ctx, s.claimTimeout)
	defer cancel()
	var secs *float64
	if err := s.pool.QueryRow(qctx, s.sql.next).Scan(&secs); err != nil || secs == nil {
		return 0, false
	}
	return time.Duration(*secs * float64(time.Second)), true
}

func (s *Source) claimBegins() {
	s.mu.Lock()
	if s.claiming == 0 {
		s.claimed = make(chan struct{})
	}
	s.claiming++
	s.mu.Unlock()
}

func (s *Source) claimEnds() {
	s.mu.Lock()
	if s.claiming--; s.claiming == 0 {
		close(s.claimed)
	}
	s.mu.Unlock()
}

func (s *Source) addOrphan(o orphan) {
	s.mu.Lock()
	s.orphans = append(s.orphans, o)
	s.mu.Unlock()
}

func (s *Source) hasOrphans() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orphans) > 0
}

// releaseOrphans hands back, not counted, the jobs that claims whose
// answer was lost took, if PostgreSQL ran them: one statement, matching
// the claim token, so a row another runner has claimed since (its lease
// having ended) is left alone. A token is kept however old it is until a
// release has run: a claim's lease ending does not make its job the
// runner's failure, and a link too slow for ClaimTimeout may still carry
// the release (an orphan dropped after its lease left the job's attempt
// counted, and at its last attempt the next claim dead-lettered a job no
// handler had run). On success every token asked about is forgotten, found
// or not (a claim whose statement still runs at the server can escape:
// its job then comes back when its lease ends). On an error the tokens are
// kept.
func (s *Source) releaseOrphans(ctx context.Context) error {
	s.mu.Lock()
	asked := append([]orphan(nil), s.orphans...)
	s.mu.Unlock()
	if len(asked) == 0 {
		return nil
	}
	tokens := make([]string, len(asked))
	for i, o := range asked {
		tokens[i] = tokenText(o.token)
	}
	rows, err := s.pool.Query(ctx, s.sql.release, tokens)
	if err == nil {
		for rows.Next() {
			var row int64
			var key string
			if err := rows.Scan(&row, &key); err == nil {
				s.log.Info(fmt.Sprintf("lameduck: ldpgx: job %s had been claimed by a claim whose answer was lost; handed back, its attempt not counted", nameOf(key, row)),
					"table", s.t.name, "row", row)
			}
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.orphans = slices.DeleteFunc(s.orphans, func(o orphan) bool {
		return slices.ContainsFunc(asked, func(a orphan) bool { return a.token == o.token })
	})
	s.mu.Unlock()
	return nil
}

// Drain is called by the worker once every loop on the Source has
// returned (see worker.Drainer). In order, it:
//
//  1. waits for the claim statements still running, if any (a Source
//     shared with another worker may still be fetching), until ctx ends;
//  2. hands back, not counted, the jobs taken by claims whose answer was
//     lost, if PostgreSQL ran them (see SourceConfig.ClaimTimeout);
//  3. stops the listener: its connection closed (which ends its LISTEN),
//     its goroutine joined (within about a second, whatever ctx says).
//
// The Source buffers no job: everything a Fetch claimed it returned, and
// the loop settles it. So Drain returns nil, unless a claim is still in
// the air: a claim statement still running when ctx ended, or the
// release of a lost claim that failed (PostgreSQL unreachable). Its error
// then says what PostgreSQL does with such a job: if the claim ran, the
// job comes back when its lease ends, by the time it names.
//
// Drain does not settle jobs in flight (the loop does, or the worker at
// the end of its teardown's hook share) and does not close the pool. A
// Fetch after Drain starts the listener again; Drain again to stop it.
func (s *Source) Drain(ctx context.Context) error {
	var errs []error
	s.mu.Lock()
	claimed := s.claimed
	s.mu.Unlock()
	if claimed != nil {
		select {
		case <-claimed:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("lameduck: ldpgx: draining %s: a claim was still running when the drain's time ended; if PostgreSQL runs it, its job comes back when its lease ends, within %s", s.t.name, s.lease))
		}
	}
	if s.hasOrphans() {
		rctx, cancel := context.WithTimeout(ctx, s.claimTimeout)
		err := s.releaseOrphans(rctx)
		cancel()
		if err != nil {
			s.mu.Lock()
			n, last := len(s.orphans), time.Time{}
			for _, o := range s.orphans {
				if o.sent.After(last) {
					last = o.sent
				}
			}
			s.mu.Unlock()
			if n > 0 {
				errs = append(errs, fmt.Errorf("lameduck: ldpgx: draining %s: %d claim(s) got no answer and could not be released (%w); if PostgreSQL ran them, their jobs come back when their leases end, by %s",
					s.t.name, n, err, last.Add(s.lease).Format(time.RFC3339)))
			}
		}
	}
	s.mu.Lock()
	lis := s.lis
	s.lis = nil
	s.mu.Unlock()
	if lis != nil {
		lis.stop()
	}
	return errors.Join(errs...)
}

// tokenText is a claim token as PostgreSQL's uuid text: every query
// execution mode of pgx encodes a string (exec and simple protocol cannot
// encode a [16]byte for a parameter whose type they do not know).
func tokenText(t [16]byte) string {
	const hexDigits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range t {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(b[:])
}

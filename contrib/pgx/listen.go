package ldpgx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenConnectTimeout bounds the listener's connect and its LISTEN.
const listenConnectTimeout = 10 * time.Second

// listenCloseTimeout bounds the listener's goodbye to the server.
const listenCloseTimeout = time.Second

// listener holds one connection in LISTEN on the table's channel and wakes
// every waiting Fetch at each notification. It runs from the first Fetch
// until Drain; while its connection is down it reconnects every Poll, and
// Fetch polls.
type listener struct {
	s      *Source            // immutable
	cancel context.CancelFunc // immutable: ends run
	done   chan struct{}      // immutable: closed when run has returned

	mu   sync.Mutex
	wake chan struct{} // guarded by mu: closed, and replaced, at each notification
	up   chan struct{} // guarded by mu: closed while listening; replaced when the connection is lost
	isUp bool          // guarded by mu
}

// listener returns the Source's listener, starting it unless it runs.
func (s *Source) listener() *listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lis == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.lis = &listener{s: s, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}), up: make(chan struct{})}
		go s.lis.run(ctx) // joined by Drain (stop)
	}
	return s.lis
}

// wakeup returns the channel the next notification closes.
func (l *listener) wakeup() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake
}

// listening returns a channel closed while the listener listens.
func (l *listener) listening() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

// notify wakes every waiting Fetch.
func (l *listener) notify() {
	l.mu.Lock()
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

// setUp records whether the listener listens.
func (l *listener) setUp(up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case up && !l.isUp:
		close(l.up)
	case !up && l.isUp:
		l.up = make(chan struct{})
	}
	l.isUp = up
}

// stop ends run and waits for it.
func (l *listener) stop() {
	l.cancel()
	<-l.done
}

// run listens until ctx ends, reconnecting every Poll after a failure. A
// failure is logged once, and so is the recovery.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	failing := false
	for {
		err := l.session(ctx, &failing)
		l.setUp(false)
		if ctx.Err() != nil {
			return
		}
		if !failing {
			failing = true
			l.s.log.Warn(fmt.Sprintf("lameduck: ldpgx: listening for new jobs failed; Fetch claims every %s until it works again", l.s.poll),
				"table", l.s.t.name, "error", err.Error())
		}
		t := time.NewTimer(l.s.poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// session connects, listens, and passes notifications on until the
// connection fails or ctx ends; it returns why it ended.
func (l *listener) session(ctx context.Context, failing *bool) error {
	cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
	defer cancel()
	// A connection of the pool's (made with its configuration and hooks:
	// a BeforeConnect that fetches a password, an AfterConnect), taken out
	// of it for good: the pool makes another when it needs one.
	pooled, err := l.s.pool.Acquire(cctx)
	if err != nil {
		return err
	}
	conn := pooled.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), listenCloseTimeout)
		defer cancel()
		_ = conn.Close(closeCtx) // the server UNLISTENs at the session's end
	}()
	var channel string
	if err := conn.QueryRow(cctx, l.s.sql.channel, l.s.t.quoted).Scan(&channel); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("table %s does not exist (create it with ldpgx.CreateTable)", l.s.t.name)
		}
		return err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	cancel()
	l.setUp(true)
	if *failing {
		*failing = false
		l.s.log.Info("lameduck: ldpgx: listening for new jobs again", "table", l.s.t.name)
	}
	l.notify() // a job may have come while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		l.notify()
	}
}

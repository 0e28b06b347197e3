package ldredis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Logger is go-redis' library logger (the internal.Logging interface that
// redis.SetLogger takes) writing through an slog.Logger, so that the lines
// go-redis prints itself ("redis: connection pool: failed to dial after 5
// attempts: ...") come out in the process's format, JSON included, instead
// of plain text on stderr. Create it with [NewLogger]. It is safe for
// concurrent use, as the slog.Logger is.
type Logger struct {
	log *slog.Logger
}

// NewLogger returns a Logger writing to log (slog.Default() when nil).
// Install it once, at start, before any client is created:
//
//	redis.SetLogger(ldredis.NewLogger(logger))
//
// redis.SetLogger is process-wide: it sets the logger of every go-redis
// client of the process. Each line is logged at slog.LevelWarn (go-redis
// gives its lines no level, and by default prints only its errors), with
// the message go-redis formatted, less its "redis: " prefix and trailing
// newline, and the attribute client=go-redis.
func NewLogger(log *slog.Logger) *Logger {
	if log == nil {
		log = slog.Default()
	}
	return &Logger{log: log}
}

// Printf logs one line of go-redis'; ctx is the context go-redis passes
// (context.Background() when nil).
func (l *Logger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	if !l.log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	msg := strings.TrimSuffix(fmt.Sprintf(format, v...), "\n")
	msg = strings.TrimPrefix(msg, "redis: ")
	l.log.LogAttrs(ctx, slog.LevelWarn, msg, slog.String("client", "go-redis"))
}

package lameduck

import (
	"context"
	"log/slog"
)

// defaultLogger returns the Logger that Config.Logger resolves to when the
// code leaves it nil: every line goes to the handler of slog.Default() at
// the time of the line, not at the time of New. A Lifecycle made before
// main calls slog.SetDefault (in a package-level variable, an init, a
// dependency-injection container built early) thus logs through the
// handler main sets, with its levels and attributes, instead of through the
// log package's bridge, which writes every line at INFO with its attributes
// folded into the message.
func defaultLogger() *slog.Logger { return slog.New(defaultHandler{}) }

// defaultHandler is a slog.Handler that hands every record to
// slog.Default()'s handler, read when the record is handled. The attributes
// and groups given to WithAttrs and WithGroup are kept, in order, and
// applied to that handler each time. It is safe for concurrent use; it
// allocates when a line is written, never on the request path.
type defaultHandler struct {
	ops []handlerOp // WithAttrs and WithGroup, in the order they were called
}

// handlerOp is one WithAttrs (group empty) or WithGroup (attrs nil) call.
type handlerOp struct {
	group string
	attrs []slog.Attr
}

func (h defaultHandler) current() slog.Handler {
	d := slog.Default().Handler()
	for _, op := range h.ops {
		if op.attrs != nil {
			d = d.WithAttrs(op.attrs)
		} else {
			d = d.WithGroup(op.group)
		}
	}
	return d
}

func (h defaultHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return slog.Default().Handler().Enabled(ctx, level)
}

func (h defaultHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.current().Handle(ctx, r)
}

func (h defaultHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return defaultHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], handlerOp{attrs: attrs})}
}

func (h defaultHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return defaultHandler{ops: append(h.ops[:len(h.ops):len(h.ops)], handlerOp{group: name})}
}

package lameduck

import (
	"context"
	"math/rand/v2"
	"net/http"
	"time"
)

// connAgeJitter spreads connections' ends: each connection's age is
// MaxConnectionAge × a random factor in [1 − connAgeJitter, 1 +
// connAgeJitter), grpc-go's rule for its MaxConnectionAge, so connections
// opened together (after a rollout) do not all close together.
const connAgeJitter = 0.1

type connDeadlineKey struct{}

// connDeadline is chained into ConnContext when Config.MaxConnectionAge is
// set: it notes when the connection turns old, as a tracker offset (the
// clock request arrivals are stamped on), jittered. One allocation per
// connection, none per request.
func (l *Lifecycle) connDeadline(ctx context.Context) context.Context {
	age := time.Duration(float64(l.cfg.MaxConnectionAge) * (1 - connAgeJitter + 2*connAgeJitter*rand.Float64()))
	return context.WithValue(ctx, connDeadlineKey{}, l.track.now()+age)
}

// connAged reports whether r's connection is past its age at offset now
// (its arrival stamp). It allocates nothing.
func connAged(r *http.Request, now time.Duration) bool {
	d, ok := r.Context().Value(connDeadlineKey{}).(time.Duration)
	return ok && now >= d
}

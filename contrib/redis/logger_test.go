package ldredis_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	ldredis "github.com/lameduck/lameduck/contrib/redis"
	"github.com/lameduck/lameduck/internal/testsupport"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// go-redis' own lines (here a pool that cannot dial) come out through the
// process's slog handler: one JSON object per line, level WARN, without
// go-redis' plain-text prefix.
func TestLoggerWritesGoRedisLinesThroughSlog(t *testing.T) {
	buf := &testsupport.LogBuffer{}
	redis.SetLogger(ldredis.NewLogger(slog.New(slog.NewJSONHandler(buf, nil))))
	t.Cleanup(logging.Enable) // go-redis' default logger again
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err == nil {
		t.Fatal("a PING to port 1 succeeded")
	}
	client.Close()
	out := buf.String()
	if out == "" {
		t.Fatal("go-redis logged nothing through the slog handler")
	}
	for line := range strings.Lines(out) {
		var rec struct{ Level, Msg, Client string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		if rec.Level != "WARN" || rec.Client != "go-redis" || strings.HasPrefix(rec.Msg, "redis: ") || !strings.Contains(rec.Msg, "dial") {
			t.Fatalf("line %q: want level WARN, client go-redis, a message about the dial without the redis: prefix", line)
		}
	}
}

// A nil logger is slog.Default(); a level above WARN drops the lines.
func TestLoggerLevels(t *testing.T) {
	buf := &testsupport.LogBuffer{}
	l := ldredis.NewLogger(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelError})))
	l.Printf(context.Background(), "redis: %s\n", "dropped")
	if buf.String() != "" {
		t.Fatalf("logged below the handler's level: %q", buf)
	}
	if ldredis.NewLogger(nil) == nil {
		t.Fatal("NewLogger(nil) = nil")
	}
	buf2 := &testsupport.LogBuffer{}
	ldredis.NewLogger(slog.New(slog.NewTextHandler(buf2, nil))).Printf(nil, "redis: pool: %d conns\n", 3)
	if got := buf2.String(); !strings.Contains(got, `level=WARN msg="pool: 3 conns" client=go-redis`) {
		t.Fatalf("got %q", got)
	}
}

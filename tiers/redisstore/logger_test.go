package redisstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestSetRedisLogger: go-redis's failed-dial lines reach the slog logger
// at the level asked, and nowhere at a level the logger drops.
func TestSetRedisLogger(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	redisstore.SetRedisLogger(l, slog.LevelDebug)
	t.Cleanup(func() { redisstore.SetRedisLogger(nil, slog.LevelDebug) })
	// Nothing listens on port 1 of loopback: the dial is refused.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialerRetries: 1, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	_ = c.Ping(context.Background()).Err()
	if out := buf.String(); !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "component=go-redis") || !strings.Contains(out, "failed to dial") {
		t.Fatalf("go-redis log lines not routed: %q", out)
	}
	buf.Reset()
	redisstore.SetRedisLogger(slog.New(slog.NewTextHandler(&buf, nil)), slog.LevelDebug) // Info handler drops Debug
	_ = c.Ping(context.Background()).Err()
	if buf.Len() != 0 {
		t.Fatalf("lines below the handler's level were written: %q", buf.String())
	}
}

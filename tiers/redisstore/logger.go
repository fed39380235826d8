package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetRedisLogger routes go-redis's own log lines (failed dials, pool
// events), which it otherwise prints to standard error, to l at level.
// go-redis has one logger per process, so this is a process-wide setting:
// call it once at start. A nil l discards them.
func SetRedisLogger(l *slog.Logger, level slog.Level) {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	redis.SetLogger(slogLogger{l: l, level: level})
}

type slogLogger struct {
	l     *slog.Logger
	level slog.Level
}

func (s slogLogger) Printf(ctx context.Context, format string, v ...any) {
	if !s.l.Enabled(ctx, s.level) {
		return
	}
	s.l.Log(ctx, s.level, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
}

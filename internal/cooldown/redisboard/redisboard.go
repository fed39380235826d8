// Package redisboard is the Redis cooldown.Board: a target's cooldown is
// one key holding the end of the cooldown (Unix microseconds, on the clock
// of the replica that started it), with a PX expiry a second past that
// end so that ended cooldowns vanish. Extending is one script call that
// keeps the later end, so replicas that see the same refusal never
// lengthen each other's cooldown; reading is one GET.
//
// What it decides: the key, prefix+"fg:out:cool:{"+target+"}" (the target
// escaped, or hashed when long, so no target can name another's key), and
// that replicas compare ends on their own clocks (NTP keeps their skew to
// milliseconds, far below any Retry-After).
package redisboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// extend keeps the later end: ARGV[1] the end in µs, ARGV[2] the expiry
// in ms.
var extend = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// Board is a cooldown.Board in Redis.
type Board struct {
	client redis.UniversalClient
	prefix string
	clock  floodgate.Clock
}

// New returns a Board on client, its keys after prefix, computing expiries
// on clk (nil: the system clock).
func New(client redis.UniversalClient, prefix string, clk floodgate.Clock) (*Board, error) {
	if client == nil {
		return nil, errors.New("redisboard: nil Redis client")
	}
	if clk == nil {
		clk = floodgate.SystemClock()
	}
	return &Board{client: client, prefix: prefix, clock: clk}, nil
}

// Key returns the Redis key of target's cooldown.
func (b *Board) Key(target string) string {
	return b.prefix + "fg:out:cool:{" + escape(target) + "}"
}

// Until implements cooldown.Board.
func (b *Board) Until(ctx context.Context, target string) (time.Time, error) {
	v, err := b.client.Get(ctx, b.Key(target)).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("redisboard: GET %s: %w", b.Key(target), err)
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("redisboard: %s holds %q, not a time", b.Key(target), v)
	}
	return time.UnixMicro(us), nil
}

// Extend implements cooldown.Board.
func (b *Board) Extend(ctx context.Context, target string, end time.Time) error {
	ttl := end.Sub(b.clock.Now()) + time.Second
	if ttl < time.Second {
		return nil // already over
	}
	err := extend.Run(ctx, b.client, []string{b.Key(target)}, end.UnixMicro(), ttl.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("redisboard: extending %s: %w", b.Key(target), err)
	}
	return nil
}

// escape keeps [A-Za-z0-9._:-] and writes other bytes as %XX; a target
// longer than 128 bytes is replaced by '#' and the hex of its SHA-256.
func escape(s string) string {
	if len(s) > 128 {
		sum := sha256.Sum256([]byte(s))
		return "#" + hex.EncodeToString(sum[:16])
	}
	const hexd = "0123456789ABCDEF"
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':' {
			out = append(out, c)
			continue
		}
		out = append(out, '%', hexd[c>>4], hexd[c&15])
	}
	return string(out)
}

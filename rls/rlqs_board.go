package rls

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// The board is where the RLQS servers that share a budget see each
// other's clients: per bucket, every client's claim (its demand and what
// it holds), each until its TTL. One server keeps it in memory; servers
// sharing one Redis keep it there, next to the bucket (its key is the
// bucket's key + ":rlqs", so it has the bucket's Cluster hash tag).

// boardEntry is one client's claim on a bucket.
type boardEntry struct {
	member string
	claim
}

// boardPost records (ttl > 0) or removes (ttl 0) a member's claim.
type boardPost struct {
	member string
	claim
	ttl time.Duration
}

// quotaBoard keeps the claims.
type quotaBoard interface {
	// sync applies the posts, by bucket, and returns the claims that
	// have not expired on every bucket of posts and of reads, in one
	// round trip.
	sync(ctx context.Context, posts map[string][]boardPost, reads []string) (map[string][]boardEntry, error)
}

// memBoard is the board of one server.
type memBoard struct {
	clock floodgate.Clock
	mu    sync.Mutex
	m     map[string]map[string]memClaim
}

type memClaim struct {
	claim
	until time.Time
}

func newMemBoard(c floodgate.Clock) *memBoard {
	return &memBoard{clock: c, m: map[string]map[string]memClaim{}}
}

func (b *memBoard) sync(_ context.Context, posts map[string][]boardPost, reads []string) (map[string][]boardEntry, error) {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]boardEntry, len(posts)+len(reads))
	for key, ps := range posts {
		bm := b.m[key]
		if bm == nil {
			bm = map[string]memClaim{}
			b.m[key] = bm
		}
		for _, p := range ps {
			if p.ttl <= 0 {
				delete(bm, p.member)
				continue
			}
			bm[p.member] = memClaim{claim: p.claim, until: now.Add(p.ttl)}
		}
		out[key] = nil
	}
	for _, key := range reads {
		out[key] = nil
	}
	for key := range out {
		bm := b.m[key]
		es := make([]boardEntry, 0, len(bm))
		for m, c := range bm {
			if !c.until.After(now) {
				delete(bm, m)
				continue
			}
			es = append(es, boardEntry{member: m, claim: c.claim})
		}
		if len(bm) == 0 {
			delete(b.m, key)
		}
		out[key] = es
	}
	return out, nil
}

// redisBoard keeps the claims in Redis: per bucket a hash of member ->
// "<expiry ms> <demand> <assigned>", expired entries dropped as it is
// read, the hash expiring with its last entry.
type redisBoard struct {
	client redis.UniversalClient
}

// boardScript applies the posts in ARGV (member, ttl ms, demand,
// assigned; ttl 0 removes) to the hash KEYS[1] and returns the entries
// that have not expired, by Redis's clock.
var boardScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV, 4 do
  local ttl = tonumber(ARGV[i+1])
  if ttl <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], (now + ttl) .. ' ' .. ARGV[i+2] .. ' ' .. ARGV[i+3])
  end
end
local all = redis.call('HGETALL', KEYS[1])
local out = {}
local longest = 0
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i+1], '^(%-?%d+)'))
  if exp == nil or exp <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out+1] = all[i]
    out[#out+1] = all[i+1]
    if exp - now > longest then longest = exp - now end
  end
end
if longest > 0 then redis.call('PEXPIRE', KEYS[1], longest) end
return out
`)

// boardKeySuffix follows a bucket's key to name its board.
const boardKeySuffix = ":rlqs"

func (b *redisBoard) sync(ctx context.Context, posts map[string][]boardPost, reads []string) (map[string][]boardEntry, error) {
	keys := make([]string, 0, len(posts)+len(reads))
	args := make([][]any, 0, cap(keys))
	for key, ps := range posts {
		a := make([]any, 0, 4*len(ps))
		for _, p := range ps {
			a = append(a, p.member, p.ttl.Milliseconds(), strconv.FormatFloat(p.demand, 'g', 10, 64), strconv.FormatFloat(p.assigned, 'g', 10, 64))
		}
		keys, args = append(keys, key), append(args, a)
	}
	for _, key := range reads {
		if _, posted := posts[key]; !posted {
			keys, args = append(keys, key), append(args, nil)
		}
	}
	if len(keys) == 0 {
		return map[string][]boardEntry{}, nil
	}
	run := func(sha bool) ([]*redis.Cmd, error) {
		pipe := b.client.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, key := range keys {
			if sha {
				cmds[i] = boardScript.EvalSha(ctx, pipe, []string{key + boardKeySuffix}, args[i]...)
			} else {
				cmds[i] = boardScript.Eval(ctx, pipe, []string{key + boardKeySuffix}, args[i]...)
			}
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(true)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		cmds, err = run(false) // a server that has not seen the script yet
	}
	if err != nil {
		return nil, fmt.Errorf("rls: RLQS board: %w", err)
	}
	out := make(map[string][]boardEntry, len(keys))
	for i, key := range keys {
		vals, err := cmds[i].StringSlice()
		if err != nil {
			return nil, fmt.Errorf("rls: RLQS board: %w", err)
		}
		es := make([]boardEntry, 0, len(vals)/2)
		for j := 0; j+1 < len(vals); j += 2 {
			f := strings.Fields(vals[j+1])
			if len(f) != 3 {
				continue
			}
			d, err1 := strconv.ParseFloat(f[1], 64)
			a, err2 := strconv.ParseFloat(f[2], 64)
			if err1 != nil || err2 != nil {
				continue
			}
			es = append(es, boardEntry{member: vals[j], claim: claim{demand: d, assigned: a}})
		}
		out[key] = es
	}
	return out, nil
}

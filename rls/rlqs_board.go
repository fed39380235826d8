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

// boardPost records (ttl > 0) or removes (ttl 0) a member's claim: its
// demand and the rate it wants; the board grants it what it wants up to
// what the bucket's other claims leave of the rate, atomically.
type boardPost struct {
	member string
	demand float64
	want   float64
	ttl    time.Duration
}

// boardBatch is the posts on one bucket of rate rate (units per second),
// granted in order (shrinking claims first).
type boardBatch struct {
	rate  float64
	posts []boardPost
}

// boardState is one bucket's claims after a sync, and what each post of
// the sync was granted (in the order of the posts; 0 for a removal).
type boardState struct {
	entries []boardEntry
	granted []float64
}

// quotaBoard keeps the claims.
type quotaBoard interface {
	// sync applies the posts, by bucket, and returns the claims that
	// have not expired on every bucket of posts and of reads, in one
	// round trip.
	sync(ctx context.Context, posts map[string]boardBatch, reads []string) (map[string]boardState, error)
}

// grant is what a claim wanting want gets when the others hold others:
// no more than the rate leaves, never below 0.
func grant(rate, want, others float64) float64 {
	return max(0, min(want, rate-others))
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

func (b *memBoard) sync(_ context.Context, posts map[string]boardBatch, reads []string) (map[string]boardState, error) {
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]boardState, len(posts)+len(reads))
	for _, key := range reads {
		out[key] = boardState{}
	}
	for key, batch := range posts {
		bm := b.live(key, now)
		st := boardState{granted: make([]float64, len(batch.posts))}
		for i, p := range batch.posts {
			if p.ttl <= 0 {
				delete(bm, p.member)
				continue
			}
			others := 0.0
			for m, c := range bm {
				if m != p.member {
					others += c.assigned
				}
			}
			st.granted[i] = grant(batch.rate, p.want, others)
			bm[p.member] = memClaim{claim: claim{demand: p.demand, assigned: st.granted[i]}, until: now.Add(p.ttl)}
		}
		out[key] = st
	}
	for key, st := range out {
		bm := b.live(key, now)
		for m, c := range bm {
			st.entries = append(st.entries, boardEntry{member: m, claim: c.claim})
		}
		if len(bm) == 0 {
			delete(b.m, key)
		}
		out[key] = st
	}
	return out, nil
}

// live returns the claims on key that have not expired at now.
func (b *memBoard) live(key string, now time.Time) map[string]memClaim {
	bm := b.m[key]
	if bm == nil {
		bm = map[string]memClaim{}
		b.m[key] = bm
	}
	for m, c := range bm {
		if !c.until.After(now) {
			delete(bm, m)
		}
	}
	return bm
}

// redisBoard keeps the claims in Redis: per bucket a hash of member ->
// "<expiry ms> <demand> <assigned>", expired entries dropped as it is
// read, the hash expiring with its last entry.
type redisBoard struct {
	client redis.UniversalClient
}

// boardScript grants the posts in ARGV (after the rate, ARGV[1]: member,
// ttl ms, demand, wanted rate; ttl 0 removes) in order on the hash
// KEYS[1], each up to what the other claims leave of the rate, and
// returns the claims that have not expired (by Redis's clock) and the
// grants, as strings.
var boardScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local cur = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local exp, d, a = string.match(all[i+1], '^(%-?%d+) (%S+) (%S+)$')
  if exp == nil or tonumber(exp) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    cur[all[i]] = {tonumber(exp), d, tonumber(a)}
  end
end
local grants = {}
for i = 2, #ARGV, 4 do
  local m, ttl = ARGV[i], tonumber(ARGV[i+1])
  if ttl <= 0 then
    cur[m] = nil
    redis.call('HDEL', KEYS[1], m)
    grants[#grants+1] = '0'
  else
    local others = 0
    for k, v in pairs(cur) do
      if k ~= m then others = others + v[3] end
    end
    local g = math.max(0, math.min(tonumber(ARGV[i+3]), rate - others))
    cur[m] = {now + ttl, ARGV[i+2], g}
    local gs = string.format('%.17g', g)
    redis.call('HSET', KEYS[1], m, (now + ttl) .. ' ' .. ARGV[i+2] .. ' ' .. gs)
    grants[#grants+1] = gs
  end
end
local out = {}
local longest = 0
for k, v in pairs(cur) do
  out[#out+1] = k
  out[#out+1] = v[2] .. ' ' .. string.format('%.17g', v[3])
  if v[1] - now > longest then longest = v[1] - now end
end
if longest > 0 then redis.call('PEXPIRE', KEYS[1], longest) end
return {out, grants}
`)

// boardKeySuffix follows a bucket's key to name its board.
const boardKeySuffix = ":rlqs"

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', 17, 64) }

func (b *redisBoard) sync(ctx context.Context, posts map[string]boardBatch, reads []string) (map[string]boardState, error) {
	keys := make([]string, 0, len(posts)+len(reads))
	args := make([][]any, 0, cap(keys))
	for key, batch := range posts {
		a := make([]any, 0, 1+4*len(batch.posts))
		a = append(a, fmtFloat(batch.rate))
		for _, p := range batch.posts {
			a = append(a, p.member, p.ttl.Milliseconds(), fmtFloat(p.demand), fmtFloat(p.want))
		}
		keys, args = append(keys, key), append(args, a)
	}
	for _, key := range reads {
		if _, posted := posts[key]; !posted {
			keys, args = append(keys, key), append(args, []any{"0"})
		}
	}
	if len(keys) == 0 {
		return map[string]boardState{}, nil
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
	out := make(map[string]boardState, len(keys))
	for i, key := range keys {
		st, err := parseBoard(cmds[i])
		if err != nil {
			return nil, fmt.Errorf("rls: RLQS board: %w", err)
		}
		out[key] = st
	}
	return out, nil
}

// parseBoard reads the board script's reply.
func parseBoard(cmd *redis.Cmd) (boardState, error) {
	v, err := cmd.Slice()
	if err != nil {
		return boardState{}, err
	}
	if len(v) != 2 {
		return boardState{}, fmt.Errorf("reply of %d parts, want 2", len(v))
	}
	es, _ := v[0].([]any)
	gs, _ := v[1].([]any)
	var st boardState
	for j := 0; j+1 < len(es); j += 2 {
		m, _ := es[j].(string)
		val, _ := es[j+1].(string)
		d, a, ok := strings.Cut(val, " ")
		df, err1 := strconv.ParseFloat(d, 64)
		af, err2 := strconv.ParseFloat(a, 64)
		if !ok || err1 != nil || err2 != nil {
			return boardState{}, fmt.Errorf("claim %q of %s is not \"<demand> <assigned>\"", val, m)
		}
		st.entries = append(st.entries, boardEntry{member: m, claim: claim{demand: df, assigned: af}})
	}
	for _, g := range gs {
		s, _ := g.(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return boardState{}, fmt.Errorf("grant %q: %w", s, err)
		}
		st.granted = append(st.granted, f)
	}
	return st, nil
}

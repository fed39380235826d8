// Package cooldown decides whether an outgoing call may be sent while the
// peer it goes to has asked to be left alone: a vendor that answered 429
// with Retry-After (or RESOURCE_EXHAUSTED with RetryInfo) is cooling down,
// for every replica that shares the Board, until the delay it named ends.
//
// What this package decides:
//
//   - the key of a call: its target, the first segment of its
//     floodgate.Request Method ("/api.vendor.com/v1/chat" ->
//     "api.vendor.com", "/vendor.v1.Chat/Complete" -> "vendor.v1.Chat"), so a
//     vendor's back-off stops every call to it, whatever its path;
//   - when a cooldown starts: a call's Done told a positive
//     floodgate.Result.RetryAfter (the peer's delay) or a negative one (a 429
//     without a delay: Config.Default), capped at Config.Max; the cooldown
//     ends then (a later end extends it, an earlier one never shortens it),
//     here at once and on the Board for the other replicas;
//   - what a call costs on the healthy path: nothing but a map read while
//     the key's end is known to be past and the last read of the Board is
//     younger than Config.Sync; then one Board read (one Redis GET),
//     made by one call of the process at a time (bounded by
//     Config.ReadTimeout). So a replica learns of
//     another's cooldown within Config.Sync, and reads the Board at most
//     once per Sync per target, whatever its call rate;
//   - a Board that fails: the cooldowns this process knows keep applying,
//     the error is logged (at most once per 10 s), and calls are sent.
//
// A Cooldown is a floodgate.Admitter (its deny is a rate-limit deny, stage
// "cooldown", RetryAfter the time left), placed before the outbound rate
// limits, so a call refused by the cooldown is charged nothing. It imports
// the core only; the Redis Board is package redisboard beneath it.
package cooldown

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Stage is the floodgate.Stage of a cooldown's decisions; a deny means
// what a rate limit's does (RESOURCE_EXHAUSTED, 429).
const Stage floodgate.Stage = "cooldown"

// Policy is the Decision.Policy of a cooldown's deny.
const Policy = "cooldown"

// Defaults of Config.
const (
	DefaultDefault = time.Second
	DefaultMax     = time.Minute
	DefaultSync    = 100 * time.Millisecond
	// MaxMax is the longest Config.Max a policy may set.
	MaxMax = time.Hour
)

// maxKeys bounds the targets a Cooldown remembers; beyond it, targets not
// cooling down are forgotten first.
const maxKeys = 4096

// Board is where cooldowns are shared: the other replicas read what one
// of them wrote. Implementations are safe for concurrent use.
type Board interface {
	// Until returns when key's cooldown ends: the zero time, or a time
	// already past, when it has none.
	Until(ctx context.Context, key string) (time.Time, error)
	// Extend makes key's cooldown end no earlier than end.
	Extend(ctx context.Context, key string, end time.Time) error
}

// Config is what a policy's outbound: cooldown: section says.
type Config struct {
	// Default is the cooldown of a refusal that named no delay (an HTTP
	// 429 without Retry-After); 0: DefaultDefault.
	Default time.Duration
	// Max caps any cooldown, however long the peer asked; 0: DefaultMax.
	Max time.Duration
	// Sync is how old this process's knowledge of a target's cooldown may
	// be before a call reads the Board again; 0 reads it on every call.
	Sync time.Duration
	// Timeout bounds the Board write of a Done (which has no context),
	// tried up to three times within it; 0: one second.
	Timeout time.Duration
	// ReadTimeout bounds a Board read on a call's path: a read that takes
	// longer is given up (logged) and the call is sent; 0: 100ms.
	ReadTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Default <= 0 {
		c.Default = DefaultDefault
	}
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 100 * time.Millisecond
	}
	return c
}

// Cooldown is the outbound cooldown stage.
type Cooldown struct {
	board  Board
	clock  floodgate.Clock
	logger *slog.Logger
	cfg    atomic.Pointer[Config] // nil: disabled, every call allowed
	mu     sync.Mutex
	keys   map[string]*entry
	logged atomic.Int64
	// Reads counts Board reads (Until), for tests and the bench.
	Reads atomic.Int64
}

type entry struct {
	c       *Cooldown
	key     string
	end     atomic.Int64 // unix ns: the known end of the cooldown
	checked atomic.Int64 // unix ns of the last Board read; 0: never
	reading atomic.Bool
	done    floodgate.Done
}

// New returns a Cooldown sharing its cooldowns on board, reading time from
// clk. It is disabled (allows everything, starts nothing) until Set.
func New(board Board, clk floodgate.Clock, logger *slog.Logger) *Cooldown {
	if clk == nil {
		clk = floodgate.SystemClock()
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Cooldown{board: board, clock: clk, logger: logger, keys: map[string]*entry{}}
}

// Set enables the cooldown with cfg (its zero fields the defaults), or
// disables it with nil: a policy without an outbound: section starts no
// cooldown, so an internal service's per-user RESOURCE_EXHAUSTED never
// stops calls to it for everyone.
func (c *Cooldown) Set(cfg *Config) {
	if cfg == nil {
		c.cfg.Store(nil)
		return
	}
	v := cfg.withDefaults()
	c.cfg.Store(&v)
}

// On reports whether the cooldown is enabled (Set with a Config): while
// it is not, Admit allows every call and starts nothing.
func (c *Cooldown) On() bool { return c.cfg.Load() != nil }

// Target is the key of a request's method: its first segment.
func Target(method string) string {
	m := strings.TrimPrefix(method, "/")
	if i := strings.IndexByte(m, '/'); i >= 0 {
		return m[:i]
	}
	return m
}

// Admit implements floodgate.Admitter.
func (c *Cooldown) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	cfg := c.cfg.Load()
	if cfg == nil {
		return floodgate.Decision{Allowed: true, Stage: Stage}, nil, nil
	}
	e := c.entry(Target(r.Method))
	now := c.clock.Now().UnixNano()
	if end := e.end.Load(); now < end {
		return c.deny(end - now), nil, nil
	}
	if last := e.checked.Load(); (last == 0 || now-last >= int64(cfg.Sync)) && e.reading.CompareAndSwap(false, true) {
		end, err := c.read(ctx, e, now, cfg.ReadTimeout)
		e.reading.Store(false)
		if err != nil {
			c.logError("read", e.key, err)
		} else if now < end {
			return c.deny(end - now), nil, nil
		}
	}
	return floodgate.Decision{Allowed: true, Stage: Stage}, e.done, nil
}

func (c *Cooldown) deny(left int64) floodgate.Decision {
	return floodgate.Decision{Stage: Stage, Source: floodgate.SourceStore, Policy: Policy,
		RetryAfter: time.Duration(left), Reset: time.Duration(left)}
}

// read reads e's cooldown from the Board and keeps the later end.
func (c *Cooldown) read(ctx context.Context, e *entry, now int64, timeout time.Duration) (int64, error) {
	c.Reads.Add(1)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	until, err := c.board.Until(ctx, e.key)
	if err != nil {
		return 0, err
	}
	e.checked.Store(now)
	if !until.IsZero() {
		raise(&e.end, until.UnixNano())
	}
	return e.end.Load(), nil
}

// finish is a call's Done: a refusal with a delay starts a cooldown.
func (e *entry) finish(res floodgate.Result) {
	if res.RetryAfter == 0 {
		return
	}
	c := e.c
	cfg := c.cfg.Load()
	if cfg == nil {
		return
	}
	d := res.RetryAfter
	if d < 0 {
		d = cfg.Default
	}
	d = min(d, cfg.Max)
	end := c.clock.Now().Add(d)
	raise(&e.end, end.UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	var err error
	for range 3 { // the other replicas stop only once it is shared
		if err = c.board.Extend(ctx, e.key, end); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		c.logError("share", e.key, err)
	}
}

// Until returns the end of key's cooldown as this process knows it.
func (c *Cooldown) Until(key string) time.Time {
	c.mu.Lock()
	e, ok := c.keys[key]
	c.mu.Unlock()
	if !ok || e.end.Load() == 0 {
		return time.Time{}
	}
	return time.Unix(0, e.end.Load())
}

func raise(v *atomic.Int64, to int64) {
	for {
		cur := v.Load()
		if cur >= to || v.CompareAndSwap(cur, to) {
			return
		}
	}
}

// entry returns key's entry, making it (and forgetting targets not
// cooling down when there are too many).
func (c *Cooldown) entry(key string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.keys[key]; ok {
		return e
	}
	if len(c.keys) >= maxKeys {
		now := c.clock.Now().UnixNano()
		for k, e := range c.keys {
			if e.end.Load() <= now {
				delete(c.keys, k)
			}
		}
	}
	e := &entry{c: c, key: key}
	e.done = e.finish
	c.keys[key] = e
	return e
}

func (c *Cooldown) logError(what, key string, err error) {
	now := time.Now().UnixNano()
	prev := c.logged.Load()
	if prev != 0 && now-prev < int64(10*time.Second) || !c.logged.CompareAndSwap(prev, now) {
		return
	}
	c.logger.Warn("floodgate: outbound cooldown board failed; the cooldowns this process knows still apply", "op", what, "target", key, "err", err)
}

// Memory is the in-process Board: the cooldowns of the Cooldowns that share
// it (one process; WithInProcess).
type Memory struct {
	mu   sync.Mutex
	ends map[string]time.Time
}

// NewMemory returns an empty in-process Board.
func NewMemory() *Memory { return &Memory{ends: map[string]time.Time{}} }

// Until implements Board.
func (m *Memory) Until(_ context.Context, key string) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ends[key], nil
}

// Extend implements Board.
func (m *Memory) Extend(_ context.Context, key string, end time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if end.After(m.ends[key]) {
		m.ends[key] = end
	}
	if len(m.ends) > maxKeys { // forget cooldowns that ended long ago
		for k, v := range m.ends {
			if v.Before(end.Add(-2 * MaxMax)) {
				delete(m.ends, k)
			}
		}
	}
	return nil
}

package redisstore

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/floodgate-go/floodgate/quota"
)

// argBuf is one command argument held in a call's arena. A *argBuf in an
// interface costs no allocation, and go-redis writes it through
// MarshalBinary, so building a command allocates nothing once the pooled
// call has grown to size.
type argBuf struct{ b []byte }

// MarshalBinary returns the argument's bytes (encoding.BinaryMarshaler).
func (a *argBuf) MarshalBinary() ([]byte, error) { return a.b, nil }

// call is the reusable state of one script invocation.
type call struct {
	args  []any
	bufs  []argBuf
	offs  []int // start, end pairs into arena, one per buf
	arena []byte
	pre   []int64 // pre-charge remaining, reset pairs (mode "p")
	// st is a mode "p" take's states, as take.lua replied them (part of
	// the reply, not copied): per bucket the state before and the state
	// written, each its length in 32-bit words and its words (see
	// cutPre); a refund puts them back into strings (putWords).
	st []int64
	// now is the time argument of a take.lua call when fixed (else the
	// script reads Redis TIME); n is the number of buckets of the built
	// call, lim the index in bufs of its limits argument and log
	// whether it has a sliding window log bucket: what the batcher needs
	// to merge calls.
	now    int64
	fixed  bool
	n, lim int
	log    bool
	// slot is the cluster slot of every key of a take sent through the
	// batcher, which merges only takes of one slot (0 on a standalone
	// Redis).
	slot int
	// abandoned is set when a batched take's caller gave up while the
	// batcher still held the call; it must then not return to the pool.
	abandoned bool
	// sent is the batched take of an abandoned call that was queued, and
	// so will be sent: its answer still comes (see answerLate).
	sent *pending
	// kind is what the call runs: a take (the zero value), a multi-slot
	// take's part (take.lua mode "p") or a refund (refund.lua); the
	// batcher merges takes, and parts apart from takes.
	kind callKind
}

// callKind is what a call runs (see call.kind).
type callKind uint8

const (
	kindTake callKind = iota
	kindPre
	kindRefund
	kindSettle
	// A report.lua call, of one slot or (kindReportNode) of several
	// slots of one cluster node; never sent through the batcher.
	kindReport
	kindReportNode
)

// oneInt reports whether the call's script replies one integer (refund.lua,
// settle.lua), not a list.
func (k callKind) oneInt() bool { return k == kindRefund || k == kindSettle }

func (c *call) reset() {
	for i := range c.args {
		c.args[i] = nil
	}
	for i := range c.bufs {
		c.bufs[i].b = nil
	}
	c.args, c.offs, c.arena, c.pre, c.st = c.args[:0], c.offs[:0], c.arena[:0], c.pre[:0], nil
	c.n, c.lim, c.now, c.fixed, c.log, c.slot, c.sent, c.kind = 0, 0, 0, false, false, 0, nil, kindTake
}

// put appends what f writes to the arena as the next buffered argument.
func (c *call) put(f func([]byte) []byte) {
	start := len(c.arena)
	c.arena = f(c.arena)
	c.offs = append(c.offs, start, len(c.arena))
}

func (c *call) putInt(v int64) {
	start := len(c.arena)
	c.arena = strconv.AppendInt(c.arena, v, 10)
	c.offs = append(c.offs, start, len(c.arena))
}

func (c *call) putStr(v string) {
	start := len(c.arena)
	c.arena = append(c.arena, v...)
	c.offs = append(c.offs, start, len(c.arena))
}

func (c *call) putKey(prefix, key string) {
	start := len(c.arena)
	c.arena = append(c.arena, prefix...)
	c.arena = append(c.arena, key...)
	c.offs = append(c.offs, start, len(c.arena))
}

// finish turns the arena offsets into argBufs, in order.
func (c *call) finish() {
	n := len(c.offs) / 2
	if cap(c.bufs) < n {
		c.bufs = make([]argBuf, n)
	}
	c.bufs = c.bufs[:n]
	for k := 0; k < n; k++ {
		c.bufs[k].b = c.arena[c.offs[2*k]:c.offs[2*k+1]:c.offs[2*k+1]]
	}
}

// order returns the bucket index of the j-th bucket of the call.
func order(idx []int, j int) int {
	if idx == nil {
		return j
	}
	return idx[j]
}

// Pre-boxed mode arguments: boxing a non-constant string allocates.
var (
	modeTake    any = "t"
	modeTakePre any = "p"
	oneTake     any = "1"
	oneKey      any = "1"
)

// build lays out a take.lua call of one take:
//
//	EVALSHA sha numkeys key... now mode minttl 1 limits
//
// over the buckets named by idx (all when nil), at c.now if c.fixed (else
// now is "": Redis TIME). With cluster, the first key is also passed as a
// plain string so the cluster client can route by it.
func (c *call) build(sc script, prefix string, buckets []quota.Bucket, idx []int, pre bool, minArg []byte, cluster bool) {
	n := len(buckets)
	if idx != nil {
		n = len(idx)
	}
	c.n = n
	// Buffered arguments, in order: numkeys, n keys, [now], minttl, limits.
	c.putInt(int64(n))
	for j := 0; j < n; j++ {
		c.putKey(prefix, buckets[order(idx, j)].Key)
	}
	if c.fixed {
		c.putInt(c.now)
	}
	c.put(func(b []byte) []byte { return append(b, minArg...) })
	c.lim = len(c.offs) / 2
	start := len(c.arena)
	c.arena = appendF64(c.arena, int64(n))
	for j := 0; j < n; j++ {
		b := &buckets[order(idx, j)]
		c.log = c.log || b.Limit.Algorithm == quota.SlidingWindowLog
		c.arena = appendTakeLimit(c.arena, b)
	}
	c.offs = append(c.offs, start, len(c.arena))
	c.finish()

	k := 0
	next := func() any { p := &c.bufs[k]; k++; return p }
	c.args = append(c.args, "evalsha", sc.shaArg, next())
	for j := 0; j < n; j++ {
		c.args = append(c.args, next())
	}
	if cluster {
		c.args[3] = string(c.bufs[1].b)
	}
	if c.fixed {
		c.args = append(c.args, next())
	} else {
		c.args = append(c.args, "")
	}
	mode := modeTake
	if pre {
		mode = modeTakePre
	}
	c.args = append(c.args, mode, next(), oneTake)
	for k < len(c.bufs) {
		c.args = append(c.args, next())
	}
}

// buildRefund lays out a refund.lua call:
//
//	EVALSHA sha numkeys key... [marker] t0 markerttl (limit before wrote)...
//
// st holds the states before and written of every bucket of idx, in
// order, as take.lua replied them in mode "p" (see call.st). A marker
// key (not "") makes the call idempotent: refund.lua sets it, for
// markerTTL ms, and a call that finds it set changes nothing, so a refund
// whose reply was lost can be sent again.
func (c *call) buildRefund(sc script, prefix string, buckets []quota.Bucket, idx []int, st []int64, t0 int64, cluster bool, marker string, markerTTL int64) {
	n := len(idx)
	nk := n
	if marker != "" {
		nk++
	}
	c.putInt(int64(nk))
	for _, i := range idx {
		c.putKey(prefix, buckets[i].Key)
	}
	if marker != "" {
		c.putStr(marker)
	}
	c.putInt(t0)
	if marker != "" {
		c.putInt(markerTTL)
	} else {
		c.putStr("")
	}
	for _, i := range idx {
		c.putRefundLimit(&buckets[i])
		st = c.putWords(st)
		st = c.putWords(st)
	}
	c.finish()
	c.args = append(c.args, "evalsha", sc.shaArg)
	for k := range c.bufs {
		c.args = append(c.args, &c.bufs[k])
	}
	if cluster {
		c.args[3] = string(c.bufs[1].b)
	}
	c.n, c.kind = n, kindRefund
}

// putRefundLimit appends bucket b's limit and cost as one argument of
// refund.lua: as appendLimit lays them out, and for a calendar window
// (Span) spanFlag on the algorithm and the window's start after the cost.
func (c *call) putRefundLimit(b *quota.Bucket) {
	start := len(c.arena)
	c.arena = appendLimit(c.arena, b)
	if !b.Span.IsZero() {
		c.arena[start] |= spanFlag
		c.arena = appendF64(c.arena, b.Span.Start.UnixMicro())
	}
	c.offs = append(c.offs, start, len(c.arena))
}

// putWords appends, as one argument, the state at the start of st (its
// length in 32-bit words, then its words: see call.st) as the bytes
// take.lua read or wrote ("" for none), and returns the rest of st. A
// short st (which cutPre never hands on) appends "".
func (c *call) putWords(st []int64) []int64 {
	start := len(c.arena)
	if len(st) > 0 && int64(len(st)-1) >= st[0] && st[0] >= 0 {
		k := st[0]
		for _, w := range st[1 : 1+k] {
			c.arena = binary.LittleEndian.AppendUint32(c.arena, uint32(w))
		}
		st = st[1+k:]
	} else {
		st = nil
	}
	c.offs = append(c.offs, start, len(c.arena))
	return st
}

// appendLimit appends bucket b's limit and cost as take.lua, refund.lua and settle.lua
// unpack them (struct "<Bdddd"): the algorithm as a byte, then rate, period
// in microseconds, burst and cost as little-endian doubles. Validated
// limits are far below 2^53, where a double stops being exact; a cost above
// it is rounded, as any Lua number would round it.
func appendLimit(dst []byte, b *quota.Bucket) []byte {
	dst = append(dst, byte(b.Limit.Algorithm))
	dst = appendF64(dst, b.Limit.Rate)
	dst = appendF64(dst, b.Limit.Period.Microseconds())
	dst = appendF64(dst, b.Limit.Burst)
	return appendF64(dst, b.Cost)
}

// appendTakeLimit appends bucket b's limit and cost as take.lua unpacks
// them: as appendLimit does, and for a bucket that may wait (MaxWait > 0)
// the algorithm byte plus waitFlag and then its longest wait in microseconds as
// one more double.
//
// A partial grant (AtMost) adds atMostFlag to the byte; a calendar window
// (Span) adds spanFlag and two more doubles, after the longest wait: the
// window's start and end in microseconds.
func appendTakeLimit(dst []byte, b *quota.Bucket) []byte {
	wait, span := b.MaxWait > 0, !b.Span.IsZero()
	if !wait && !span && !b.AtMost {
		return appendLimit(dst, b)
	}
	a := byte(b.Limit.Algorithm)
	if wait {
		a |= waitFlag
	}
	if b.AtMost {
		a |= atMostFlag
	}
	if span {
		a |= spanFlag
	}
	dst = append(dst, a)
	dst = appendF64(dst, b.Limit.Rate)
	dst = appendF64(dst, b.Limit.Period.Microseconds())
	dst = appendF64(dst, b.Limit.Burst)
	dst = appendF64(dst, b.Cost)
	if wait {
		dst = appendF64(dst, b.MaxWait.Microseconds())
	}
	if span {
		dst = appendF64(dst, b.Span.Start.UnixMicro())
		dst = appendF64(dst, b.Span.End.UnixMicro())
	}
	return dst
}

// appendF64 appends v as a little-endian double.
func appendF64(dst []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64(v)))
}

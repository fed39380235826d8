package quota

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Algorithm selects how a bucket counts.
//
// Every Store implements every algorithm with exactly the arithmetic below,
// so that the in-process store and the Redis scripts give the same decision
// on the same trace (package testing/storetest holds the shared vectors).
// All times are integer microseconds (now = Unix time in µs); N is
// Limit.Rate, P is Limit.Period in µs, B is Limit.Burst, c is the cost.
// Arithmetic marked (f) is IEEE double, done in the order written.
//
// TokenBucket (state: tokens (f), ts):
//
//	new bucket: tokens = B, ts = now
//	elapsed = max(0, now - ts)
//	tokens  = min(B, tokens + (elapsed * N) / P)          (f)
//	allow iff c <= tokens; then tokens = tokens - c       (f)
//	remaining   = floor(tokens)
//	retry_after = deny ? ceil(((c - tokens) * P) / N) : 0 (f, then ceil; one
//	              µs more if tokens + (retry_after * N) / P < c)
//	reset       = ceil(((B - tokens) * P) / N)            (f, then ceil)
//	state saved (tokens, ts = now) only when allowed and c > 0; TTL = reset (at least 1 ms)
//
// GCRA (state: tat (f), in µs since GCRAEpoch); T = P / N (f):
//
//	t = now - GCRAEpoch                                   (exact: small integers)
//	new bucket: tat = t
//	tat0 = max(tat, t)
//	tat1 = tat0 + c * T                                   (f)
//	S = min(GCRASlack, T / 2)
//	allow iff tat1 - t <= B * T + S                       (f)
//	remaining   = floor((B * T + S - ((allow ? tat1 : tat0) - t)) / T), at least 0
//	retry_after = deny ? ceil(tat1 - t - B * T - S) : 0
//	reset       = ceil((allow ? tat1 : tat0) - t)
//	state saved (tat = tat1) only when allowed and c > 0; TTL = reset (at least 1 ms)
//
// Times are taken relative to GCRAEpoch so the stored TAT keeps about 0.01 µs
// of precision for centuries (an absolute Unix µs double has only 0.25 µs), and
// the comparison allows GCRASlack (half a microsecond, below the clock's
// resolution) so a burst that lands exactly on its tolerance is not denied
// by rounding in the last bit; at most half an emission interval, so that
// at more than one unit a microsecond the slack is never a whole unit (it
// let 10 000/ms burst 10 admit 14 at one instant).
//
// SlidingWindowCounter (state: win, curr, prev); W = P, L = N (burst unused):
//
//	w = floor(now / W); e = now - w*W
//	stored win == w   -> curr, prev as stored
//	stored win == w-1 -> prev = stored curr, curr = 0
//	otherwise         -> prev = 0, curr = 0
//	weighted = (prev * (W - e)) / W + curr                (f)
//	allow iff weighted + c <= L; then curr = curr + c
//	remaining = max(0, floor(L - weighted - (allow ? c : 0)))
//	retry_after (deny):
//	  if curr + c <= L (prev > 0 necessarily):
//	    ceil(W - ((L - curr - c) * W) / prev) - e         (f, then ceil)
//	  else: (W - e) + ceil(max(0, W - ((L - c) * W) / curr))
//	reset = curr > 0 ? (w+2)*W - now : prev > 0 ? (w+1)*W - now : 0
//	state saved only when allowed and c > 0; TTL = (w+2)*W - now
//
// SlidingWindowLog (state: the timestamps of admitted units); W = P, L = N:
//
//	drop every timestamp t with t <= now - W
//	n = number left
//	allow iff n + c <= L; then record c timestamps equal to now
//	remaining   = max(0, L - n - (allow ? c : 0))
//	retry_after (deny): with the timestamps sorted ascending, the
//	  (n + c - L)-th oldest, t_k: t_k + W - now
//	reset = newest + W - now (0 when empty)
//	TTL = W
//
// FixedWindow (state: win, count); W = P, L = N. Allows up to 2L across a
// window boundary (L at the end of one window, L at the start of the next):
// that is the documented price of its single counter.
//
//	w = floor(now / W); count = stored win == w ? stored count : 0
//	allow iff count + c <= L; then count = count + c
//	remaining   = max(0, L - count)
//	retry_after = deny ? (w+1)*W - now : 0
//	reset       = (w+1)*W - now
//	TTL = (w+1)*W - now
//
// A cost larger than the bucket's capacity (Limit.Capacity) can never be
// admitted: every Store denies it, charges nothing, and reports
// RetryAfter == Never. A cost of 0 reads a bucket without charging it.
// Reset and RetryAfter too large for a time.Duration are reported as the
// largest Duration. Remaining is never negative (a lowered limit, a
// settlement's debt or units booked ahead can leave more units counted
// than the limit, or a token bucket below 0 tokens).
//
// Waiting (Bucket.MaxWait = M µs, TokenBucket and GCRA only; M = 0 is the
// arithmetic above). A bucket that would deny admits the cost when its
// units arrive within M, by booking them now, so later takes see them
// spent and queue behind (x/time/rate's Reserve):
//
//	TokenBucket: wait = c <= tokens ? 0 : ceil(((c - tokens) * P) / N)   (f, then ceil)
//	             allow iff c <= B and wait <= M; then tokens = tokens - c (below 0: booked ahead)
//	GCRA:        wait = tat1 - t <= B * T + S ? 0 : ceil(tat1 - t - B * T - S)
//	             allow iff c <= B and wait <= M; then tat = tat1
//
// Partial grants (Bucket.AtMost; c is then the most to charge). Before
// deciding, each AtMost bucket's remaining as it stands (R, the remaining
// of a take of cost 0 at now, above) is read, and every AtMost bucket of
// the take is decided by the arithmetic above at one cost, the grant:
//
//	g = min(c, min over the take's AtMost buckets of R)
//	cost of every AtMost bucket = c == 0 ? 0 : max(1, g)
//	Result.Granted = the take charged ? that cost : 0
//
// so the take charges the largest amount every level can give, all or
// nothing at that amount (the buckets without AtMost are charged their own
// Cost), and when no unit can be given it denies as a take of one unit
// would, with that unit's RetryAfter. Every AtMost bucket of a take has
// the same Cost, and no bucket of such a take has MaxWait (ValidateTake).
//
// Calendar windows (Bucket.Span, FixedWindow only; s and z its start and
// end in µs). The window is the one given, not floor(now / W), so windows
// of unequal length (a month, a day with a DST change) count exactly; the
// caller computes them, the store needs no time zone:
//
//	count = stored win == s ? stored count : 0   (win stores s)
//	allow iff count + c <= L; then count = count + c
//	remaining   = max(0, L - count)
//	retry_after = deny ? max(1, z - now) : 0
//	reset       = max(1, z - now)
//	TTL         = max(1, z - now)
//
// Limit changes. State is kept by Key, and a state records the limit it
// was written under, so a take (settlement, report) under a changed Limit
// on the same Key — a rule's new rate, burst or window, a tenant's new
// plan tier — keeps what its callers consumed: a raise gives its extra
// room at once, a cut takes effect at once, and nothing is refilled or
// forgotten. Until a take that charges (c > 0) writes it under the new
// limit, the state counts down at the pace of the limit it was written
// under: what was consumed comes back on the schedule it was consumed
// under, and the state reads as absent exactly when that limit says, so a
// store that keeps state longer (a TTL rounded up) decides the same. A
// state written under another limit reads, in place of the arithmetic
// above (Bw, Rw: the burst and rate N/P it was written under; Tw its
// emission interval; t, T, BT, S as in GCRA; w, W, e of the limit in force):
//
//	TokenBucket:  tokens = min(Bw, tokens + elapsed * Rw) + (B - Bw)        (f)
//	              reset  = ceil((B - tokens) / Rw)                           (f, then ceil)
//	              retry_after = ceil((c - tokens) / Rw)                      (f, then ceil)
//	GCRA (tat > t): tat0 = t + ((tat - t) / Tw) * T                         (f)
//	              reset  = ceil(tat - t)  (the TAT as stored)
//	              retry_after = ceil((tat - t) - ((BT + S - c * T) * Tw) / T) (f, then ceil)
//	FixedWindow:  the stored count counts while the window it was counted
//	              in lasts (its end z is after now), in whatever window
//	              holds now; reset and retry_after (a count above 0) z - now
//	SlidingWindowCounter (Ww: the window it was written under): each
//	              stored count (curr, of [win*Ww, (win+1)*Ww), and prev, of
//	              the window before it) counts in the newest window of
//	              length W that its own window overlaps (curr if it ends
//	              after w*W, else prev if it ends after (w-1)*W), until
//	              x = (win+2)*Ww; reset and retry_after at most x - now
//	SlidingWindowLog: its timestamps are its state: a changed rate counts
//	              them against the new limit, a shorter window forgets
//	              those now outside it; every take that finds entries
//	              keeps the log a window (the one in force) beyond its
//	              newest, so a longer window counts what the log still
//	              holds
//
// With the limit it was written under these are the arithmetic above.
// A token bucket's retry_after, in both forms, is one µs more when the
// rounded quotient leaves tokens + retry_after * N / P (or * Rw) below c.
// A rule that changes algorithm starts from fresh state (the policy's
// keys name the algorithm), and so does a window of a rule with several
// windows whose period changes (each is keyed by its period).
//
// An allowed bucket reports its wait in Result.Wait (remaining and reset
// as after the charge); a denied one reports RetryAfter as without M (the
// wait until it would admit at once). The window algorithms cannot book
// ahead (their state is one window's count, not a time): a bucket of
// theirs with MaxWait is refused by ValidateTake.
//
// Settlement (Settler.Settle; d = the bucket's signed Cost: d > 0 charges
// d more units, d < 0 gives -d back). Nothing is denied: a charge that
// overdraws the bucket is debt, which later takes wait out. At the
// store's now, with the state read as a take reads it:
//
//	TokenBucket:          tokens = min(B, tokens + (elapsed * N) / P)   (the refill, as a take does)
//	                      tokens = min(B, tokens - d), ts = now          (below 0: debt)
//	GCRA:                 d > 0: tat = max(tat, t) + d * T               (beyond B * T: debt)
//	                      d < 0: tat = max(t, tat + d * T)               (never before now)
//	FixedWindow:          count = max(0, count + d)                      (the current window's)
//	SlidingWindowCounter: curr = max(0, curr + d)                        (the current window's)
//	SlidingWindowLog:     d > 0: record d timestamps equal to now
//	                      d < 0: drop the -d newest timestamps in the window
//
// So the window algorithms settle in the window current at settlement: a
// request admitted in one window and settled in the next counts its
// estimate in the first and the difference in the second (its actual cost
// over the two), and a refund never takes more than the current window
// holds; a debt beyond L denies the rest of that window (the sliding
// counter carries it, weighted, into the next). A bucket whose state is
// absent is full: a refund leaves it absent, a charge starts it from full.
// The state's TTL becomes what a take leaving that state would set.
type Algorithm uint8

// Algorithms. The zero value is TokenBucket, the default.
const (
	TokenBucket Algorithm = iota
	GCRA
	SlidingWindowCounter
	SlidingWindowLog
	FixedWindow
)

var algorithmNames = [...]string{"token_bucket", "gcra", "sliding_window_counter", "sliding_window_log", "fixed_window"}

// String returns the policy-file name of a: "token_bucket", "gcra",
// "sliding_window_counter", "sliding_window_log" or "fixed_window".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// UnmarshalText sets a from its name as written by String; case and
// surrounding spaces are ignored (encoding.TextUnmarshaler, so the
// type decodes from YAML, JSON and flags).
func (a *Algorithm) UnmarshalText(text []byte) error {
	s := string(text)
	t := strings.ToLower(strings.TrimSpace(s))
	for i, n := range algorithmNames {
		if n == t {
			*a = Algorithm(i)
			return nil
		}
	}
	return fmt.Errorf("unknown algorithm %q (want one of %s)", s, strings.Join(algorithmNames[:], ", "))
}

// MarshalText returns the name String writes; an unknown value is an
// error.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.known() {
		return nil, fmt.Errorf("unknown %s", a)
	}
	return []byte(a.String()), nil
}

// Limit is the arithmetic of one bucket: Rate units per Period, with Burst
// as the bucket's capacity for TokenBucket and GCRA. The window algorithms
// admit Rate units per window of length Period and ignore Burst.
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
}

// Capacity is the largest cost one request can ever be charged: Burst for
// TokenBucket and GCRA, Rate for the window algorithms.
func (l Limit) Capacity() int64 {
	switch l.Algorithm {
	case TokenBucket, GCRA:
		return l.Burst
	}
	return l.Rate
}

// The numbers of the contract: the bounds on a bucket's fields, which
// keep every intermediate value of the algorithms exact in IEEE doubles
// (and so in Redis Lua), GCRA's constants, and the durations every store
// and every caller agree on.
const (
	// MaxRate, MinPeriod and MaxPeriod bound a Limit's Rate (and Burst)
	// and Period, enforced by Limit.Validate.
	MaxRate   = 1_000_000_000
	MinPeriod = time.Millisecond
	MaxPeriod = 366 * 24 * time.Hour

	// MaxSpan is the longest Bucket.Span: a leap year and an hour.
	MaxSpan = 366*24*time.Hour + time.Hour

	// MaxMaxWait is the longest Bucket.MaxWait (and rule max_wait)
	// allowed: a request held longer than a minute is better told to
	// come back.
	MaxMaxWait = time.Minute

	// MaxSettle bounds the size of one settlement adjustment
	// (|Bucket.Cost| in Settle): 2^53, where a double (the Redis scripts'
	// numbers) stops being exact.
	MaxSettle = 1 << 53

	// GCRAEpoch is the origin, in Unix microseconds, of GCRA's stored
	// times: 2026-01-01T00:00:00Z.
	GCRAEpoch int64 = 1_767_225_600_000_000

	// GCRASlack is the tolerance, in microseconds, of GCRA's comparison,
	// capped at half the emission interval (S in the formulas of the
	// Algorithm doc).
	GCRASlack = 0.5

	// Never is the RetryAfter of a bucket whose cost exceeds its
	// capacity: no amount of waiting admits the request.
	Never time.Duration = -1

	// StoreErrorRetryAfter is the RetryAfter of every deny decided
	// without the store that only the store could lift: a rule with
	// on_store_error "closed", and a cost above a rule's local share in a
	// fallback.
	StoreErrorRetryAfter = time.Second

	// ReportRecordTTL is how long a Reporter remembers a report call:
	// within it, Resolve says whether a call whose reply never came was
	// applied. Resolved later, a call that was applied reads as not
	// applied, and its units are charged once more when sent again
	// (package tiers/localfirst caps what it resends at its share of the
	// bucket).
	ReportRecordTTL = time.Minute
)

// Validate reports what is wrong with l, or nil.
func (l Limit) Validate() error {
	if int(l.Algorithm) >= len(algorithmNames) {
		return fmt.Errorf("unknown algorithm %d", l.Algorithm)
	}
	if l.Rate < 1 || l.Rate > MaxRate {
		return fmt.Errorf("rate %d is out of range [1, %d]", l.Rate, MaxRate)
	}
	if l.Period < MinPeriod || l.Period > MaxPeriod {
		return fmt.Errorf("period %s is out of range [%s, %s]", l.Period, MinPeriod, MaxPeriod)
	}
	if l.Period%time.Microsecond != 0 {
		return fmt.Errorf("period %s is not a whole number of microseconds", l.Period)
	}
	if l.Algorithm == TokenBucket || l.Algorithm == GCRA {
		if l.Burst < 1 || l.Burst > MaxRate {
			return fmt.Errorf("burst %d is out of range [1, %d]", l.Burst, MaxRate)
		}
	}
	return nil
}

// FailMode is what a rule does when its store cannot answer (error, timeout,
// open circuit breaker).
type FailMode uint8

// Fail modes. The zero value is FailLocal, the default.
const (
	// FailLocal decides with a local golang.org/x/time/rate limiter at the
	// rule's rate divided by the number of replicas.
	FailLocal FailMode = iota
	// FailOpen allows.
	FailOpen
	// FailClosed denies, with a retry-after.
	FailClosed
)

var failModeNames = [...]string{"local", "open", "closed"}

// String returns "local", "open" or "closed".
func (m FailMode) String() string {
	if int(m) < len(failModeNames) {
		return failModeNames[m]
	}
	return fmt.Sprintf("failmode(%d)", uint8(m))
}

// UnmarshalText sets m from its name as written by String; case and
// surrounding spaces are ignored (encoding.TextUnmarshaler, so the
// type decodes from YAML, JSON and flags).
func (m *FailMode) UnmarshalText(text []byte) error {
	s := string(text)
	t := strings.ToLower(strings.TrimSpace(s))
	for i, n := range failModeNames {
		if n == t {
			*m = FailMode(i)
			return nil
		}
	}
	return fmt.Errorf("unknown on_store_error %q (want local, open or closed)", s)
}

// MarshalText returns the name String writes; an unknown value is an
// error.
func (m FailMode) MarshalText() ([]byte, error) {
	if !m.known() {
		return nil, fmt.Errorf("unknown %s", m)
	}
	return []byte(m.String()), nil
}

// Consistency is where a rule's decisions are made: in the store on every
// request (Exact), or locally against a share of the store's budget
// (Leased, Async; package tiers/localfirst). Stores decide every bucket
// exactly; the local modes are a Store in front of them.
type Consistency uint8

// Consistencies. The zero value is Exact, the default.
const (
	// Exact decides every request with a store take (in Redis: one
	// round trip), all levels at once. For strict, low-rate rules.
	Exact Consistency = iota
	// Leased takes units from the store's bucket in chunks and spends
	// them locally. It never admits more than the store would; it may
	// admit less, by what other instances hold. TokenBucket and GCRA only.
	Leased
	// Async decides locally on the last known state of the store's
	// bucket and reports hits in batches every sync interval; it can
	// admit more than the limit, by a documented bound. TokenBucket and
	// GCRA only.
	Async
)

var consistencyNames = [...]string{"exact", "leased", "async"}

// String returns "exact", "leased" or "async".
func (c Consistency) String() string {
	if int(c) < len(consistencyNames) {
		return consistencyNames[c]
	}
	return fmt.Sprintf("consistency(%d)", uint8(c))
}

// UnmarshalText sets c from its name as written by String; case and
// surrounding spaces are ignored (encoding.TextUnmarshaler, so the
// type decodes from YAML, JSON and flags).
func (c *Consistency) UnmarshalText(text []byte) error {
	s := string(text)
	t := strings.ToLower(strings.TrimSpace(s))
	for i, n := range consistencyNames {
		if n == t {
			*c = Consistency(i)
			return nil
		}
	}
	return fmt.Errorf("unknown consistency %q (want exact, leased or async)", s)
}

// MarshalText returns the name String writes; an unknown value is an
// error.
func (c Consistency) MarshalText() ([]byte, error) {
	if !c.known() {
		return nil, fmt.Errorf("unknown %s", c)
	}
	return []byte(c.String()), nil
}

// CanBookAhead reports whether a's charge can be taken ahead and given
// back: what the Leased and Async consistencies and Bucket.MaxWait need
// (TokenBucket and GCRA; the window algorithms count one window, not a
// time, and a Reporter charges them to the window of Bucket.Admitted).
func (a Algorithm) CanBookAhead() bool { return a == TokenBucket || a == GCRA }

// Known reports whether a is one of the algorithms above.
func (a Algorithm) Known() bool { return int(a) < len(algorithmNames) }

func (a Algorithm) known() bool { return a.Known() }

func (m FailMode) known() bool { return int(m) < len(failModeNames) }

func (c Consistency) known() bool { return int(c) < len(consistencyNames) }

// Bucket is one level of a hierarchical decision: the state at Key, counted
// by Limit, charged Cost.
type Bucket struct {
	// Key identifies the bucket's state in the store. It is built by the
	// policy from escaped or hashed identity components, so no client input
	// can make it equal another principal's key. A Redis Cluster hash tag,
	// when present, is the first "{...}" in Key.
	Key string
	// Limit is the bucket's arithmetic. State is kept by Key alone, so a
	// rule whose rate, burst or window changes keeps its callers'
	// consumption (Algorithm, "Limit changes"); Key names the algorithm,
	// so a rule that changes algorithm starts from fresh state.
	Limit Limit
	// Cost is charged when every bucket of the Take allows.
	Cost int64
	// Admitted is, in a report call (Reporter) of a window algorithm's
	// bucket, when its units were admitted, on the reporter's clock: the
	// store charges them to the window that holds this time, or not at all
	// when that window no longer counts (see Reporter). It is zero in
	// every other use; takes and settlements ignore it. It is rounded down
	// to whole microseconds.
	Admitted time.Time
	// Rule names the policy rule the bucket belongs to, for counting and
	// logs (a fallback store counts its decisions by rule). Stores must not
	// key state by it: Key already names the rule.
	Rule string
	// OnStoreError is what a fallback store does for this bucket when the
	// primary store cannot answer.
	OnStoreError FailMode
	// CacheDenials lets a store answer "still denied" locally, without a
	// round trip, until the bucket's retry-after passes.
	CacheDenials bool
	// Consistency is where the bucket's decisions are made. Stores decide
	// every bucket exactly; a tiers/localfirst Store in front of them
	// decides Leased and Async buckets locally.
	Consistency Consistency
	// SyncInterval is how often an Async bucket's hits are reported to
	// the store (0 for other consistencies).
	SyncInterval time.Duration
	// MaxWait, when positive, lets a bucket that would deny admit the
	// cost by booking units that arrive within MaxWait (TokenBucket and
	// GCRA only; see Algorithm): the take charges now and the bucket's
	// Result.Wait says how long the request must wait before it
	// proceeds. 0 means no waiting. It is rounded down to whole
	// microseconds.
	MaxWait time.Duration
	// AtMost makes Cost the most to charge, not the amount: the take
	// grants the largest amount up to Cost that every AtMost bucket of it
	// can give, and charges that (a partial grant; see Algorithm). Every
	// AtMost bucket of a take has the same Cost, and no bucket of the take
	// has MaxWait.
	// Result.Granted reports the amount charged.
	AtMost bool
	// Span, when not zero, is the calendar window a FixedWindow bucket
	// counts in, instead of the window of length Limit.Period that holds
	// now (see Algorithm): its start and its end, which Reset and
	// RetryAfter report. The caller computes it (in a time zone, on a
	// month's first day), so stores need no time-zone data. Both are
	// whole microseconds, End after Start, at most MaxSpan apart.
	Span Span
}

// Span is a window of time: [Start, End).
type Span struct {
	Start, End time.Time
}

// IsZero reports whether s is the zero Span (no calendar window).
func (s Span) IsZero() bool { return s.Start.IsZero() && s.End.IsZero() }

// Result is what a Store reports for one bucket of a Take.
type Result struct {
	// Allowed is true when this bucket alone would admit the request. The
	// Take as a whole allowed only if every bucket did.
	Allowed bool
	// Limit is the bucket's quota: Limit.Capacity().
	Limit int64
	// Remaining is the quota left: after the charge when the Take allowed,
	// as it stands (nothing charged) when it denied.
	Remaining int64
	// Reset is the time until the bucket is fully restored.
	Reset time.Duration
	// RetryAfter is, for a bucket that denies, the wait until it would
	// admit the same cost; Never when it never can. 0 when Allowed.
	RetryAfter time.Duration
	// Wait is, for a bucket that allowed only by booking units ahead
	// (Bucket.MaxWait) in a Take that charged, how long until those units
	// are there: the request must not proceed before. 0 otherwise.
	Wait time.Duration
	// Granted is, for a bucket with AtMost of a Take that charged, the
	// amount charged (from 1 to its Cost); 0 otherwise.
	Granted int64
	// Source is what decided this bucket; the zero value means
	// floodgate.SourceStore.
	Source floodgate.Source
}

// Store keeps bucket state and decides hierarchical takes atomically.
//
// Take charges every bucket its Cost if and only if every bucket allows it;
// otherwise it charges nothing. A bucket with MaxWait allows by booking
// units that arrive within it (see Algorithm): the Take then charges, and
// the caller must hold the request for the largest Result.Wait before it
// proceeds (or give the units back with Settler.Settle if it does not).
// It writes one Result per bucket into res,
// which must have len(res) >= len(buckets), and reports whether the take
// was allowed. An error means the store could not decide (res is then
// undefined); a deny is never an error. Arguments that ValidateTake
// refuses are refused with its error, before anything is charged.
//
// Implementations must be safe for concurrent use and must not retain
// buckets or res after Take returns.
type Store interface {
	Take(ctx context.Context, buckets []Bucket, res []Result) (allowed bool, err error)
}

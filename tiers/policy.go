package tiers

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Policy is the rate-limit policy: plan tiers, the rules every request is
// checked against, per-key overrides and per-method options. It is what a
// YAML policy file decodes into (see Load) and can equally be built in Go.
//
// A Policy is read-only once handed to NewLimiter or Limiter.SetPolicy (or
// returned by Load): the Limiter compiles it and keeps the compiled form, so
// later changes to the struct are not seen and must not be made.
type Policy struct {
	// Tiers maps a plan tier name to its limit, for rules whose rate is
	// "tier".
	Tiers map[string]Tier
	// DefaultTier is the tier used, by rules whose rate is "tier", for a
	// request whose Tier is empty or not in Tiers. It is required as soon
	// as one rule has rate "tier".
	DefaultTier string
	// Rules are the levels of the hierarchy. Every rule that matches a
	// request charges it; all must allow.
	Rules []Rule
	// Overrides give one key of one rule another rate.
	Overrides []Override
	// Methods holds per-method options (cost, priority) keyed by exact
	// method: a gRPC full method or an HTTP route pattern.
	Methods map[string]floodgate.MethodOptions
	// Exempt lists client networks that are never limited: a request
	// whose Identity.IP is inside one is allowed without charging any
	// rule (Decision.Policy PolicyExempt, Source floodgate.SourcePolicy).
	// A single address is a /32 or /128. Prefixes must have no bits set
	// past their length (10.0.0.0/8, not 10.0.0.1/8); IPv4-mapped IPv6
	// prefixes (::ffff:10.0.0.0/104) are IPv4 prefixes.
	Exempt []netip.Prefix
	// Deny lists client networks whose requests are always denied,
	// before any rule is charged (Decision.Policy PolicyDeny, Source
	// floodgate.SourcePolicy, quota hidden, RetryAfter 0: waiting cannot
	// cure it). An address in both Deny and Exempt is denied. The same
	// form as Exempt.
	Deny []netip.Prefix
	// Shadow runs the whole policy in dry-run mode: every rule is decided
	// and reported as a shadow rule (Rule.Shadow), and the deny list is
	// reported (Decision.Shadow, Policy PolicyDeny) without denying.
	// Nothing is denied. It follows reloads like every other field.
	Shadow bool
	// RLS maps the descriptors of a gateway's rate-limit calls (Envoy's
	// RateLimitService, package github.com/floodgate-go/floodgate/rls) to
	// the rules, so the edge and the services spend one budget; see
	// RLSDomain. YAML: rls. Services ignore it.
	RLS []RLSDomain
}

// Decision.Policy of the requests decided by no rule of the policy: by
// its address lists (exempt, deny), or, for a gateway descriptor, by the
// descriptor's own limit (Descriptor.Limit, Envoy's limit override). No
// rule may take these names.
const (
	PolicyExempt          = "exempt"
	PolicyDeny            = "deny"
	PolicyDescriptorLimit = "descriptor-limit"
)

// Default IP prefix lengths of an ip key scope (Rule.IPv4Prefix,
// Rule.IPv6Prefix): one IPv4 address, one IPv6 /64, the block a single
// IPv6 client (a home, a phone, a VM) is commonly given and can rotate
// addresses in at will.
const (
	defaultIPv4Prefix = 32
	defaultIPv6Prefix = 64
)

// Tier is the limit of one plan tier.
type Tier struct {
	// Rate is N per period; it cannot itself be "tier".
	Rate Rate
	// Burst is the capacity for TokenBucket and GCRA; 0 means Rate.N.
	// It must be 0 for the window algorithms, which have no burst.
	Burst int64
	// Windows, instead of Rate and Burst, gives the tier several windows
	// (100 a minute and 1000 an hour); see Window.
	Windows []Window
	// Algorithm counts the tier's buckets; the zero value is TokenBucket.
	Algorithm quota.Algorithm
}

// Window is one window of a limit with several: a Tier, Rule or Override
// whose Windows is set instead of its Rate and Burst. In YAML it is a list
// of rates, with an optional list of bursts of the same length:
//
//	rate: [100/1m, 1000/1h]
//	burst: [20, 1000]
//
// Every window is its own bucket, counted by the owner's algorithm, and a
// level of the same all-or-nothing take: a request passes only if every
// window of every matching rule admits it, and a deny by one window
// charges no other. The windows of one limit must have distinct periods,
// at most 8 of them. A limit with several windows names each
// "<rule>/<period>" ("tenant-plan/1h", the period as written by
// Rate.String) in decisions, quota headers and QuotaFailure, and keys each
// bucket by its period too (see the package doc); a limit with one window,
// written either way, is named and keyed by the rule alone.
type Window struct {
	// Rate is N per period; it cannot be "tier".
	Rate Rate
	// Burst is the window's capacity for TokenBucket and GCRA; 0 means
	// Rate.N. It must be 0 for the window algorithms.
	Burst int64
}

// maxWindows is the most windows one limit may have.
const maxWindows = 8

// Rate is "N per Period", or, when Tier is true, "whatever the caller's plan
// tier says". In YAML it is written "N/duration" ("10/1s", "100/1h",
// "10/500ms", and whole days or weeks: "1000/1d", "5000/1w", rolling
// periods of 24 and 168 hours), "N/day", "N/week", "N/month", "N/year"
// (a calendar rate) or "tier".
type Rate struct {
	// N is how many units the period admits.
	N int64
	// Period is the window N is counted over.
	Period time.Duration
	// Tier means the rate of the caller's plan tier; N and Period are
	// then zero.
	Tier bool
	// Calendar, when set, counts N per calendar day, week, month or year
	// ("50000/month"), in fixed windows that start at midnight in the
	// rule's TimeZone; Period is then the unit's nominal length (24h, 7
	// days, 31 days, 366 days) and the windows' true lengths are counted.
	// Only a rule's own rate, and its overrides' (per the same unit), may
	// be a calendar rate.
	Calendar Calendar
}

// parseRate parses "N/duration" (N a decimal integer, duration as accepted
// by time.ParseDuration, or whole days or weeks: "1d", "7d", "2w", rolling
// periods of 24 and 168 hours), "N/day", "N/week", "N/month", "N/year" (a
// calendar rate) or "tier". It checks syntax only; Policy validation
// checks the ranges (N >= 1, quota.MinPeriod <= period <=
// quota.MaxPeriod, whole microseconds). A rate it cannot parse is refused
// with the spelling to use when the mistake is a common one ("5/minute":
// write 5/1m).
func parseRate(s string) (Rate, error) {
	if s == "tier" {
		return Rate{Tier: true}, nil
	}
	num, dur, ok := strings.Cut(s, "/")
	if !ok || num == "" || dur == "" || !allDigits(num) {
		return Rate{}, fmt.Errorf("%q is not N/duration (10/1s, 100/1h, 1000/1d) or tier", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return Rate{}, fmt.Errorf("%q is not N/duration: %s is not a 64-bit count", s, num)
	}
	if u, ok := parseCalendar(dur); ok {
		return Rate{N: n, Period: nominal[u], Calendar: u}, nil
	}
	d, ok := parsePeriod(dur)
	if !ok {
		return Rate{}, fmt.Errorf("%q is not N/duration (%s)", s, spelling(num, dur))
	}
	return Rate{N: n, Period: d}, nil
}

// parsePeriod parses a rate's duration: time.ParseDuration's forms, or a
// whole number of days or weeks ("1d", "2w"), which it does not know.
func parsePeriod(s string) (time.Duration, bool) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, true
	}
	n, unit := s[:len(s)-1], s[len(s)-1]
	if n == "" || !allDigits(n) || (unit != 'd' && unit != 'w') {
		return 0, false
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v > int64(quota.MaxPeriod/(24*time.Hour)) {
		return 0, false // beyond any valid period: refused by name
	}
	if unit == 'w' {
		return time.Duration(v) * 7 * 24 * time.Hour, true
	}
	return time.Duration(v) * 24 * time.Hour, true
}

// spelling says how to write a rate whose duration unit is a word.
func spelling(num, unit string) string {
	switch strings.ToLower(strings.TrimSuffix(unit, "s")) {
	case "sec", "second":
		return "write " + num + "/1s"
	case "min", "minute":
		return "write " + num + "/1m"
	case "hr", "hour":
		return "write " + num + "/1h"
	case "day":
		return "write " + num + "/1d for a rolling day, or " + num + "/day for calendar days"
	case "week":
		return "write " + num + "/1w for a rolling week, or " + num + "/week for calendar weeks"
	}
	return "the duration is 500ms, 10s, 1m, 1h, 1d or 1w; day, week, month or year for calendar windows"
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String returns the rate as written in a policy file: "tier",
// "N/duration" or "N/<calendar unit>".
func (r Rate) String() string {
	if r.Tier {
		return "tier"
	}
	if r.Calendar != NoCalendar {
		return strconv.FormatInt(r.N, 10) + "/" + r.Calendar.String()
	}
	return strconv.FormatInt(r.N, 10) + "/" + shortDuration(r.Period)
}

// shortDuration formats d like time.Duration.String without trailing zero
// units: "1h", "1m", "1h30m", "500ms".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Scope is one component of a rule's key: what identifies the bucket a
// request is charged to.
type Scope uint8

// Scopes. The zero value is not a scope.
const (
	// ScopeEndpoint keys on Request.Method.
	ScopeEndpoint Scope = iota + 1
	// ScopeUser keys on Identity.User.
	ScopeUser
	// ScopeAPIKey keys on Identity.APIKey (always hashed in keys).
	ScopeAPIKey
	// ScopeIP keys on Identity.IP.
	ScopeIP
	// ScopeTenant keys on Identity.Tenant.
	ScopeTenant
	// ScopeHeader keys on the value of a header or gRPC metadata key
	// (Request.Headers), named by Rule.KeyHeaders; written
	// "header:<name>" in YAML. The client chooses that value unless an
	// edge proxy sets it: it is no identity (see Rule.KeyHeaders).
	ScopeHeader
)

var scopeNames = [...]string{"", "endpoint", "user", "api_key", "ip", "tenant", "header"}

// String returns the policy-file name of s.
func (s Scope) String() string {
	if s >= ScopeEndpoint && int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return "scope(" + strconv.Itoa(int(s)) + ")"
}

func (s Scope) valid() bool { return s >= ScopeEndpoint && int(s) < len(scopeNames) }

// parseScope parses a scope name: endpoint, user, api_key, ip, tenant or
// header (the kind of every header scope; a rule names its header in
// Rule.KeyHeaders).
func parseScope(s string) (Scope, error) {
	for i := 1; i < len(scopeNames); i++ {
		if scopeNames[i] == s {
			return Scope(i), nil
		}
	}
	return 0, fmt.Errorf("unknown scope %q (want endpoint, user, api_key, ip, tenant or header:<name>)", s)
}

// Match selects the requests a rule applies to. The zero Match matches
// every request.
type Match struct {
	// Method is an exact method, or a glob in path.Match syntax over
	// Request.Method: "/search.v1.Search/*" matches every method of the
	// service ('*' never crosses a '/'), "GET /v1/items/{id}" matches that
	// HTTP route pattern exactly (braces are literal), and
	// "* /v1/items/{id}" matches that route for every HTTP method. It must
	// start with '/' or with an upper-case HTTP method (or '*') and a space.
	// Empty matches every method.
	Method string
	// Header maps header (gRPC metadata) names to the values that match:
	// the request matches when, for every name, the first value it sent
	// of that header is one of the listed values (exact, case-sensitive
	// comparison). Names are case-insensitive ([A-Za-z0-9_.-]; lower-case
	// in Request.Headers); a request without the header, or that sent it
	// empty, does not match. The transport copies the headers a policy names into
	// Request.Headers (package interceptor does). A client chooses its
	// headers: a header match selects the limit a well-behaved client
	// gets (mobile apps, a partner's integration), and a client that
	// drops or changes the header escapes the rule, so keep a rule that
	// does not depend on it as the safety net.
	Header map[string][]string
	// Tier lists plan tiers: the request matches when its tier, as rules
	// with rate "tier" see it (Request.Tier when it is one of the
	// policy's tiers, else DefaultTier), is one of them. Each must be a
	// tier of the policy.
	Tier []string
}

// Rule is one level of the hierarchy.
type Rule struct {
	// Name identifies the rule in decisions, headers and keys:
	// [A-Za-z0-9_.-]+, unique in the policy.
	Name string
	// Match selects the requests the rule applies to; zero = all.
	Match Match
	// Key lists the scopes whose values identify a bucket, most
	// significant first (the first one is the Redis Cluster hash tag).
	// Empty means one bucket for every request the rule matches.
	Key []Scope
	// KeyHeaders names, in order, the header (gRPC metadata key) of each
	// ScopeHeader in Key: Key [ScopeTenant, ScopeHeader] with KeyHeaders
	// ["x-region"] is written key: [tenant, header:x-region] in YAML.
	// Names are case-insensitive, [A-Za-z0-9_.-], distinct, and not one
	// whose value the policy must not key on (authorization, cookie,
	// proxy-authorization: use api_key; forwarded, x-forwarded-for,
	// x-real-ip: use ip, resolved through trusted proxies only; host).
	// Values are escaped or hashed like every identity component. A
	// request without the header does not apply the rule (it is named in
	// Decision.Skipped). The client chooses the value, so a header scope
	// is no identity: every value is a fresh bucket, and a client that
	// rotates values multiplies its budget. Key on a header only next to
	// a scope the client cannot choose (tenant, user, api_key, ip), and
	// keep a rule on that scope alone to cap the total.
	KeyHeaders []string
	// Rate is N per period, or "tier" for the caller's plan tier.
	Rate Rate
	// Burst is the capacity for TokenBucket and GCRA; 0 means Rate.N. It
	// must be 0 for the window algorithms and for rate "tier" (the tier
	// sets it).
	Burst int64
	// Windows, instead of Rate and Burst, gives the rule several windows;
	// see Window. Not with rate "tier" (the tier may have windows).
	Windows []Window
	// Algorithm counts the rule's buckets; the zero value is TokenBucket.
	// It must be TokenBucket (unset) for rate "tier": the tier sets it.
	Algorithm quota.Algorithm
	// Cost, when > 0, is charged for every request the rule matches,
	// whatever the request's own cost. 0 means: the request's Cost if > 0
	// (which the transport resolves from, first, this policy's Methods;
	// see package interceptor), else 1.
	Cost int64
	// HideQuota asks transports not to reveal this rule's quota when it
	// binds.
	HideQuota bool
	// OnStoreError is what the rule does when the store cannot answer.
	OnStoreError quota.FailMode
	// WhenMissing is what a request that lacks a scope of the rule's key
	// (no user, no tenant, no API key, no client address, no such header)
	// gets: "skip", the rule does not apply to it (Decision.Skipped
	// names it), or "deny", it is denied before anything is charged
	// (Decision.Policy the rule's name, Source floodgate.SourcePolicy,
	// quota hidden, RetryAfter 0: waiting cannot cure it; a shadow rule,
	// or any rule of a shadow policy, skips instead). "" (the default)
	// skips as
	// "skip" does, but a rule keyed on a scope the transport never fills
	// is then reported (RequireScopes) or, strict, refused: saying skip
	// or deny is the user's explicit choice that such requests are
	// expected. Only on a rule with a key. YAML: when_missing.
	WhenMissing string

	// line is the rule's line in the YAML it was loaded from; 0 when
	// built in Go.
	line int
	// Shadow runs the rule in dry-run mode: it is decided and reported but
	// never denies.
	Shadow bool
	// Soft makes the rule a soft limit (quota mode): it never denies, but
	// a request it would deny is admitted and marked. Within its limit the
	// rule is decided and charged like any rule, in the same Take; a
	// request over it is admitted, charged nothing at the rule (its
	// bucket counts the requests admitted within the limit and never
	// goes below empty), and named in Decision.SoftExceeded, which the
	// transports send to the client (see package interceptor) and package
	// otel counts per rule. A request a hard rule denies charges nothing,
	// at soft rules neither. A soft rule never binds a decision: Policy,
	// Limit and Remaining, and the RateLimit fields, describe the hard
	// rules. Not with Shadow, EnforcePercent or MaxWait; in a shadow
	// policy (Policy.Shadow) it is a shadow rule like every other. YAML:
	// soft: true.
	Soft bool
	// EnforcePercent, when in [1, 99], rolls the rule out gradually: it
	// denies only requests whose key falls in that share of all keys, and
	// acts as a shadow rule (Shadow) for the others, whose denials are
	// reported with Decision.Shadow. 0 means 100: the rule is enforced for
	// every request (a rule enforced for none is a Shadow rule). The share
	// is chosen by a hash of the rule's name and the request's bucket key
	// body (its identity values: no prefix, algorithm or window), or, for
	// a rule without key, of the rule's name and the request's identity
	// (tenant, user, API key, client address): the same principal is
	// enforced on every instance and every request, and raising the
	// percentage only adds principals.
	EnforcePercent int
	// CacheDenials lets stores answer "still denied" locally until the
	// retry-after passes.
	CacheDenials bool
	// Consistency is where the rule's decisions are made; the zero value
	// is Exact. Leased and Async need TokenBucket or GCRA (for rate
	// "tier", in every tier; and in every override of the rule).
	Consistency quota.Consistency
	// SyncInterval is how often an Async rule's hits are reported to the
	// store: 0 means DefaultSyncInterval; at least MinSyncInterval and at
	// most MaxSyncInterval. It must be 0 unless Consistency is Async.
	SyncInterval time.Duration
	// TimeZone is the IANA time zone ("Europe/Berlin") whose midnight
	// starts the windows of a calendar rate (Rate.Calendar); "" means
	// UTC. Only with a calendar rate.
	TimeZone string
	// WeekStarts is the weekday a weekly calendar rate ("N/week")
	// resets on, at midnight; the zero value is Sunday. In YAML:
	// week_starts: monday.
	WeekStarts time.Weekday
	// IPv4Prefix and IPv6Prefix are how many leading bits of the client
	// address name its bucket at the rule's ip scope: every address of
	// one such prefix shares one bucket. 0 means 32 for IPv4 and 64 for
	// IPv6. IPv4Prefix must be in [1, 32] and
	// IPv6Prefix in [1, 128], and either may be set only on a rule whose
	// key has ip. An IPv4-mapped IPv6 address (::ffff:192.0.2.1) is the
	// IPv4 address it maps.
	IPv4Prefix, IPv6Prefix int
	// Settle makes the rule's charge an estimate, settled when the
	// request ends: the request is charged the rule's cost (the cost
	// resolution above: the rule's own, else the request's, else 1) when
	// admitted, and when it ends with an actual cost (floodgate.ReportCost,
	// Result.HasCost) the difference is charged or refunded on the rule's
	// bucket; a request a later stage denied (floodgate.Ignored) is
	// refunded its whole charge. Any algorithm (see Algorithm,
	// "Settlement"); the store must be a Settler. See the package doc.
	Settle bool
	// Meter names what the rule's settlement counts (a plan priced per
	// meter: input_tokens, output_tokens, bytes): "" (the default) is the
	// default meter, settled to floodgate.ReportCost's value; a named
	// meter is settled to what the handler reported with
	// floodgate.ReportMeter for that name, and keeps its estimate when
	// the handler reported nothing for it. What a meter rule charges at
	// admission is its own Cost, else its meter's estimate (the value
	// reported with floodgate.ReportMeter before admission), else 1;
	// never Request.Cost, which is the default meter's. A meter rule must
	// settle (a meter is only read at settlement); its name is 1 to 64 of
	// [A-Za-z0-9_.-]. YAML: meter. See the package doc, "Settlement".
	Meter string
	// MaxWait, when positive, shapes instead of denying: a request the
	// rule would deny, but whose units arrive within MaxWait (and before
	// its context's deadline), is admitted after waiting for them, its
	// units booked at once so waiters are served in order. At most
	// MaxMaxWait; TokenBucket or GCRA only (for rate "tier", in every
	// tier, and in every override); not with consistency leased. The
	// store must be a Settler (a cancelled wait gives its units back).
	// Named so it cannot be confused with the client interceptor's
	// WithMaxDelay, which is how long a client waits before retrying.
	MaxWait time.Duration
	// MaxWaiters caps the requests of one bucket waiting at once in this
	// process (0: DefaultMaxWaiters); only with MaxWait. A request that
	// would wait beyond the cap is decided as if the rule had no MaxWait.
	MaxWaiters int
}

// DefaultMaxWaiters is a max_wait rule's cap on the requests of one bucket
// waiting at once in one process, unless Rule.MaxWaiters says otherwise;
// MaxMaxWaiters is the largest cap allowed.
const (
	DefaultMaxWaiters = 64
	MaxMaxWaiters     = 1 << 20
)

// Bounds and default of Rule.SyncInterval.
const (
	DefaultSyncInterval = 50 * time.Millisecond
	MinSyncInterval     = time.Millisecond
	MaxSyncInterval     = 10 * time.Second
)

// Override gives one key of one rule its own rate.
type Override struct {
	// Rule names the rule.
	Rule string
	// Key gives a value for exactly the scopes of the rule's key but its
	// header scopes (KeyHeaders). API key values are the raw key (it is
	// hashed like a request's). An IP value
	// is an address or a CIDR ("198.51.100.0/24": an office range), and
	// the override applies to every request whose address is inside it,
	// each client prefix keeping its own bucket at the override's rate.
	// It may not be narrower than the rule's prefix for its family (an
	// IPv6 address in a rule keyed on /64s: name the /64), since every
	// address of one bucket must meet one limit. Where several CIDR
	// overrides contain an address, the longest prefix wins.
	Key map[Scope]string
	// KeyHeaders gives a value for each header scope of the rule's key,
	// by header name (case-insensitive): key: {tenant: acme,
	// "header:x-region": eu} in YAML.
	KeyHeaders map[string]string
	// Rate is the key's rate; it cannot be "tier".
	Rate Rate
	// Burst as in Rule; 0 means Rate.N.
	Burst int64
	// Windows, instead of Rate and Burst, gives the key several windows;
	// see Window.
	Windows []Window
	// Algorithm, when non-nil, counts the key's bucket; nil means the
	// rule's algorithm (TokenBucket for a rule whose rate is "tier"). An
	// override with another algorithm than the rule's starts from fresh
	// state, as its key names it.
	Algorithm *quota.Algorithm
}

// FieldError is one thing wrong with a policy: the path of the field
// ("rules[2].rate"), what is wrong, and for a policy loaded from YAML the
// line (0 when unknown).
type FieldError struct {
	// Path is the field's path in the policy, "" for the whole policy.
	Path string
	// Msg says what is wrong.
	Msg string
	// Line is the field's line in the YAML file; 0 when unknown.
	Line int
}

// Error returns "path: msg, at line N".
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		b.WriteString(", at line ")
		b.WriteString(strconv.Itoa(e.Line))
	}
	return b.String()
}

// PolicyError lists everything wrong with a policy, in file order.
type PolicyError struct {
	// Errs are the errors, at least one.
	Errs []*FieldError
}

// Error lists the errors one per line.
func (e *PolicyError) Error() string {
	var b strings.Builder
	for i, fe := range e.Errs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Unwrap returns the individual *FieldError values.
func (e *PolicyError) Unwrap() []error {
	out := make([]error, len(e.Errs))
	for i, fe := range e.Errs {
		out[i] = fe
	}
	return out
}

// Validate reports everything wrong with p as a *PolicyError, or nil.
func (p *Policy) Validate() error {
	_, err := compile(p, defaultKeyPrefix, nil)
	if err != nil {
		return err
	}
	return nil
}

// reporter collects FieldErrors, attaching lines from a YAML decode when
// known and dropping errors under paths the decoder already reported.
type reporter struct {
	errs  []*FieldError
	lines map[string]int      // path -> line, from YAML
	bad   map[string]struct{} // paths with decode errors
}

func (r *reporter) add(p, msg string) {
	if r.bad != nil {
		for q := p; ; q = parentPath(q) {
			if _, ok := r.bad[q]; ok {
				return
			}
			if q == "" {
				break
			}
		}
	}
	line := 0
	if r.lines != nil {
		for q := p; ; q = parentPath(q) {
			if l, ok := r.lines[q]; ok {
				line = l
				break
			}
			if q == "" {
				break
			}
		}
	}
	r.errs = append(r.errs, &FieldError{Path: p, Msg: msg, Line: line})
}

func (r *reporter) addf(p, format string, args ...any) { r.add(p, fmt.Sprintf(format, args...)) }

func (r *reporter) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	errs := slices.Clone(r.errs)
	sort.SliceStable(errs, func(i, j int) bool {
		li, lj := errs[i].Line, errs[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
	return &PolicyError{Errs: errs}
}

// parentPath strips the last element of a field path: "rules[2].rate" ->
// "rules[2]" -> "rules" -> "".
func parentPath(p string) string {
	if p == "" {
		return ""
	}
	if strings.HasSuffix(p, "]") {
		// Index or quoted map key: find the matching '['.
		depth := 0
		for i := len(p) - 1; i >= 0; i-- {
			switch p[i] {
			case ']':
				depth++
			case '[':
				depth--
				if depth == 0 {
					return p[:i]
				}
			case '"':
				// Skip quoted section: keys are strconv.Quote'd and may hold brackets.
				j := i - 1
				for j >= 0 && (p[j] != '"' || backslashed(p, j)) {
					j--
				}
				if j < 0 {
					return ""
				}
				i = j
			}
		}
		return ""
	}
	if i := strings.LastIndexAny(p, ".]"); i >= 0 {
		if p[i] == ']' {
			return p[:i+1]
		}
		return p[:i]
	}
	return ""
}

func backslashed(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

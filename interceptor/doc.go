// Package interceptor adapts floodgate stages (any floodgate.Admitter: the
// shedder, the concurrency limiter, the tiers limiter, or a floodgate.Chain
// of them) to gRPC and net/http. It is the only package that knows the
// transports: it turns a call into a floodgate.Request and a Decision into
// a status, headers and a body.
//
// # Composition
//
// New validates the options once and returns an Interceptor; its
// UnaryServer, StreamServer and HTTP methods make one interceptor per
// stage, in chain order, for grpc.ChainUnaryInterceptor /
// grpc.ChainStreamInterceptor, or one around a floodgate.Chain. That is
// the one way to wire a chain: every interceptor of it from one New.
// The first floodgate interceptor of a call builds the floodgate.Request
// and stores it in the context, where floodgate.FromContext finds it
// (Request and context are one allocation); every later one reuses it, so
// every stage of a call decides on one Request, with one cost and one
// priority. An interceptor made by another New reuses it too: its own
// options that would build the Request differently do not apply, and it
// logs so (at most once per 10 s).
//
// The interceptor finds what a stage offers (a *tiers.Limiter's methods:
// section, the request headers its rules read, its identity check)
// through floodgate.All, so a stage behind wrappers that follow floodgate's
// unwrap convention (Unwrap() floodgate.Admitter), or inside a Chain,
// keeps all three.
//
// Each admitted stage's Done runs exactly once when the call finishes: on
// return, on panic (deferred), on client cancellation (the handler returns)
// and, for streams, when the stream handler returns. Streams are charged
// once when they open; WithPerMessage also charges every received message.
//
// Done is told how the call ended (floodgate.Result): OutcomeSuccess when
// the handler returned no error (HTTP: wrote a status below 400, or
// nothing); OutcomeDropped for overload signals (gRPC DeadlineExceeded,
// ResourceExhausted, Unavailable, or a returned context deadline; HTTP
// 429, 503, 504); OutcomeIgnored when the client cancelled, the handler
// panicked, or (per-message charges) a stream message was admitted;
// OutcomeFailed for any other error or status. When the handler called
// floodgate.ReportCost, Result.Cost carries the actual cost so a rate
// limit charged on an estimate settles. The estimate is the method's cost,
// or what WithCost reads from the call before it is admitted (a
// completion's max_tokens). A call a rate-limit rule held before letting
// it proceed (max_wait; Decision.Waited) gets a Server-Timing metric,
// "floodgate-wait;dur=<ms>", as an HTTP response header or gRPC response
// metadata. A call admitted over a soft rate limit
// (floodgate.Decision.SoftExceeded; package tiers, soft: true) is marked:
// the HTTP response header X-RateLimit-Soft-Exceeded, or the gRPC response
// header metadata x-ratelimit-soft-exceeded (unary and streams), an RFC
// 9651 List of Strings naming each soft limit ("plan", "tokens/1d"), and
// floodgate.Request.SoftExceeded, which the handler reads through
// floodgate.FromContext. A call within every soft limit, and a denied
// one, carries no mark. HTTP handlers get a ResponseWriter
// that records the status; it passes http.Flusher through and unwraps for
// http.ResponseController.
// WithObserver reports every stage's decision once, to each observer.
//
// A stage's error never decides by itself: the Decision does. An error with
// an allowing Decision lets the call proceed and is logged through
// log/slog at most once per 10 s per interceptor.
//
// # gRPC status mapping
//
// What a deny means is the deciding stage's floodgate.Semantics
// (Stage.Semantics); this package reads it and decides nothing itself.
// A deny from the shedder (StageShedder) is UNAVAILABLE; any other deny
// (tiers, concurrency) is RESOURCE_EXHAUSTED; never INTERNAL or UNKNOWN.
// The status carries google.rpc.ErrorInfo (reason RATE_LIMIT_EXCEEDED,
// CONCURRENCY_LIMIT_EXCEEDED or LOAD_SHED, the configured domain, and
// metadata stage/policy/limit/window_seconds), google.rpc.RetryInfo when
// the stage gave a RetryAfter, and google.rpc.QuotaFailure naming the
// policy for tiers and concurrency denials (one violation per violated
// window when the decision lists several, Decision.Quotas: a rule with a
// minute and an hour window, or two rules denying at once, the binding
// one first). When Decision.HideQuota is set
// the policy name, limit and QuotaFailure are left out. The trailer
// grpc-retry-pushback-ms carries RetryAfter in milliseconds rounded up (or
// -1, "do not retry", when waiting cannot help), which grpc-go's own retry
// policy honours for codes listed in retryableStatusCodes. See DenyStatus.
//
// UnaryClient and StreamClient retry RESOURCE_EXHAUSTED and UNAVAILABLE
// only when the server said when (pushback trailer first, then RetryInfo),
// with bounded attempts and jitter added on top of the server's delay,
// never waiting past the context deadline. WithThrottle (off by default)
// adds the SRE book's client-side adaptive throttling: while the server
// rejects most calls, the client rejects a share of them itself, without
// sending them (see Throttle; IsClientThrottled tells such a call).
//
// # HTTP mapping
//
// A shedder deny is 503, any other deny 429; never 500. A deny carries
// Retry-After in delay-seconds (RetryAfter rounded up), Cache-Control:
// no-store, and an application/problem+json body (RFC 9457) of type
// ...#quota-exceeded (429) or ...#temporary-reduced-capacity (503) with
// title, status, detail and violated-policies (every violated window of
// Decision.Quotas, else the binding policy; left out when HideQuota).
//
// Every response of a limited route whose binding decision is a rate limit
// (a Policy with a positive Limit and Window), allowed or denied, carries
// the draft-ietf-httpapi-ratelimit-headers-10 fields
//
//	RateLimit-Policy: "name";q=<Limit>;w=<Window seconds, rounded up>
//	RateLimit: "name";r=<Remaining>;t=<seconds>
//
// where t is RetryAfter rounded up on a deny and Reset rounded up on an
// allow, so Retry-After never points earlier than t. A decision with
// several windows (Decision.Quotas) lists each, the binding one first:
//
//	RateLimit-Policy: "plan/1m";q=10;w=60, "plan/24h";q=1000;w=86400
//	RateLimit: "plan/1m";r=0;t=6, "plan/24h";r=990;t=864
//
// each window's t its RetryAfter when it is violated and its Reset
// otherwise; Retry-After is never earlier than the t of a violated
// window. A shadow decision (Decision.Shadow: a dry-run rule or policy,
// or a rule outside its enforce_percent share, would have denied) sends
// no RateLimit fields: the request was not limited. The policy name is an
// RFC 9651 String (\ and " escaped); a name with non-ASCII or control
// characters cannot be one, and the fields are then omitted (logged).
// Concurrency and shedder decisions have no window and send no RateLimit
// fields. When HideQuota is set no RateLimit fields are sent at all: a
// hidden quota (login attempts) reveals neither its size nor what is left.
// WithLegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset (Unix
// epoch seconds, now + t).
//
// The Method of an HTTP request is its route pattern; see HTTP for how to
// get one when the middleware wraps the whole mux.
//
// WithDenyResponse answers denials in an API's own error format: it sets
// the HTTP status and body of a denial and the message of its gRPC status;
// the fields above, the gRPC code, details and pushback trailer stay.
//
// # Other transports
//
// Module connectmw adapts connect-go with the same options and the same
// Request building as the gRPC interceptors: an Interceptor given to
// connectmw.NewHandler admits Connect calls as UnaryServer admits gRPC
// calls and denies them with what UnaryServer and HTTP send for the same
// decision (the gRPC status with its details, the HTTP fields, the
// pushback), in Connect's terms; connectmw.NewClient applies UnaryClient's
// retry rules and throttle to a Connect client. It reaches this package
// through a seam of the repository's own (package internal/seam), which
// is not part of the API: a transport of the user's admits its calls with
// floodgate.Admitter directly.
//
// # Trust
//
// The client IP is the immediate peer's address. Only when that peer is in
// WithTrustedProxies is the one forwarding header chosen with
// WithClientIPHeader read (X-Forwarded-For by default, or RFC 7239
// Forwarded for=, or X-Real-IP; the same keys in gRPC metadata): its hops
// are walked right to left and the first hop that is not itself a trusted
// proxy is the client. An unparsable, "unknown" or obfuscated hop stops the
// walk at the last address a trusted proxy vouched for. A client sending
// X-Forwarded-For from an untrusted address is identified by that address.
// When go-grpc-middleware's realip already resolved the client before
// floodgate, module grpcmw's WithRealIP takes its answer instead, and
// falls back to the walk above when it has none.
//
// The address resolved is unmapped (an IPv4-mapped IPv6 address is the
// IPv4 address) and has no zone. Rate limits key it by network, not by
// address: package tiers puts every IPv4 address in its own bucket and
// every IPv6 /64 in one (a client owns its /64 and can rotate addresses in
// it at will), settable per rule with ipv4_prefix and ipv6_prefix; a
// policy's exempt: and deny: lists and overrides match networks too. A
// spoofed forwarding header from an untrusted peer therefore still lands
// in the peer's own prefix.
//
// User, tenant, API key and tier come only from Extractors the operator
// supplies: FromClaims for claims of a token the auth layer already
// verified; FromProtoField (a request field marked with the
// floodgate.v1.identity option, such as LoginRequest.user) or FromMessage
// (a Go func over the decoded request) for the value the handler acts on;
// FromHTTPRequest for a func over the *http.Request (the middleware never
// reads a body itself; the func may, and the handler then finds the form
// parsed); FromHeader for a header the edge sets and strips; FirstOf to
// try several in order; or any function. Unary gRPC calls have their
// request message when the Request is built. Streams are admitted when
// they open, before any message is read, so message extractors find
// nothing there (nor over HTTP), and a rule keyed on what only they give
// is skipped for those calls. A login limiter keys on the account the
// login submits, never on a header the client picks: a guesser who
// changes the header still guesses, and is limited on, the same account.
//
// Every decision names the rules it skipped for lack of identity
// (floodgate.Decision.Skipped). A rule that can never apply, keyed on a
// scope for which this Interceptor has no extractor, is warned about once
// when UnaryServer, StreamServer or HTTP wraps its *tiers.Limiter, and on
// each reload that brings one; WithStrictIdentity makes it a panic at
// construction and a failed reload instead. API keys are passed to the
// stages only; this package never logs them or puts them in errors.
//
// Health checks are never limited: every /grpc.health.v1.Health/ method,
// and the HTTP paths given to WithHealthPaths. Nor are the ORCA load
// report streams (/xds.service.orca.v3.OpenRcaService/, package guard's
// WithLoadReports): a report of overload must not be shed by it, and a
// stream held open for reports is not load. WithSkip exempts more.
//
// # Request headers a policy reads
//
// A policy can match on header (gRPC metadata) values and key on them
// (package tiers: match.header, key scope header:<name>). The interceptor
// learns from the stages it wraps which headers they need (a
// *tiers.Limiter's RequestHeaders, read on every call so reloads apply)
// and copies the first value of each, and nothing else, into
// floodgate.Request.Headers; it declares the header scope to the stages'
// scope checks, so WithStrictIdentity accepts such rules. These values
// are what the client sent: they select and split limits, and never set
// the Identity or the client address (the policy cannot name credential
// or forwarding headers). Trust rules stay as above: a value is only as
// trustworthy as the edge that sets it.
//
// # Cost and priority
//
// A call's Request.Cost and Request.Priority are resolved in one place, in
// one order, once per call: every stage of the call sees the same two
// values, however its interceptors are wired (see Composition). For cost
// and priority separately, the first source that sets one wins:
//
//  1. the policy: the methods: section of every stage the Interceptor wraps
//     that has one (a *tiers.Limiter; found by the interceptor itself, in
//     chain order, and read on every call so reloads apply);
//  2. the Go map given to WithMethods;
//  3. the proto annotation (floodgate.v1.method, gRPC only, read once per
//     method from protoregistry.GlobalFiles and cached);
//  4. for priority over HTTP, the HTTP method (GET, HEAD, OPTIONS, TRACE
//     read; others write); else the stage's own default.
//
// A positive estimate from WithCost overrides all of them for cost (0
// leaves the method's cost); a trusted priority header
// (WithPriorityHeader) overrides all of them for priority. Cost 0 means
// unset: each rate-limit rule's own cost applies, or 1. A rule with a cost
// of its own charges it whatever the request's cost.
//
// # Outbound calls
//
// RoundTripper, UnaryOutbound and StreamOutbound admit the
// calls this service makes through stages of its own (package guard's
// outbound rate limits and cooldown), as the server interceptors admit
// the calls it receives. Two things differ from the server side:
//
//   - the Request is built afresh for every outgoing call, never reused
//     from the context, which may carry the incoming call's; its Method is
//     "/HOST/PATH" for HTTP (the URL's host, with its port when it names
//     one, and its path) and the full method for gRPC; the identity
//     extractors read the outgoing headers (metadata) and the context, and
//     each identity part they leave empty is the incoming call's, when the
//     context carries one (a per-tenant outbound rule keys on the tenant
//     whose request made the call);
//   - a refused call is not sent: the RoundTripper returns an error (which
//     http.Client wraps in a *url.Error), never a response the peer did not
//     send, and the client interceptors return it as the call's error. It is
//     the status a server interceptor would send for the same decision
//     (RESOURCE_EXHAUSTED with RetryInfo; status.FromError, RetryDelay read
//     it through the *url.Error), and IsClientThrottled reports true for it.
//
// Every admitted call's Done is told how the peer answered, in
// floodgate.Result: its Outcome and, when the peer refused it for load,
// RetryAfter: an HTTP 429 or 503's Retry-After (delay-seconds, or an
// HTTP-date read against WithClock's clock), -1 for a 429 without one;
// a gRPC RESOURCE_EXHAUSTED or UNAVAILABLE's pushback trailer or RetryInfo.
// An HTTP call's Done runs when the response headers arrive (or the call
// fails), a gRPC unary call's when it returns, a stream's when its
// first receive error (io.EOF included) or NewStream's error comes.
package interceptor

package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/interceptor"
)

// Defaults of what a policy file does not set (the package doc and the
// options say each).
const (
	// defaultShedStart is where the adaptive shedder's capacity starts, in
	// requests in flight, without a shedder: section; it then follows the
	// service's latency and throughput between defaultShedMin and
	// shedder.DefaultAdaptiveMax.
	defaultShedStart = 64
	defaultShedMin   = 8
	// defaultMaxInFlight caps the requests in flight on one instance
	// without a concurrency: global: key.
	defaultMaxInFlight = 1024
	// defaultPolicyInterval is how often WithPolicyFile's file is read.
	defaultPolicyInterval = time.Second
)

// Option configures New.
type Option func(*config)

type config struct {
	policyPath  string
	policyData  []byte
	hasPolicy   int
	inProcess   bool
	redisURL    string
	hasRedisURL bool
	client      redis.UniversalClient
	service     string
	logger      *slog.Logger
	mp          metric.MeterProvider
	tp          trace.TracerProvider
	mux         *http.ServeMux
	icOpts      []interceptor.Option
	claims      func(context.Context) (map[string]any, bool)
	timeout     time.Duration
	interval    time.Duration
	keyPrefix   string
	onBreaker   func(name string, from, to gobreaker.State)
	loadReports bool
	clock       floodgate.Clock // the load meter's and the denial summary's, for tests
	errs        []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("guard: "+format, args...))
}

// WithPolicyFile loads the policy from the YAML file at path (rules,
// tiers, and the shedder:, concurrency: and identity: sections; see
// package policyfile) and watches it: a
// change takes effect within two intervals (WithPolicyInterval, default
// 1s), and a file that fails to load leaves the policy in force and is
// logged with the line of each error. A shedder: or concurrency: section
// removed later returns its stage to what the file said at New (the
// default when it said nothing then); a change to identity: is refused
// until a restart, since the transports read identities as built. Give
// exactly one of WithPolicyFile and WithPolicy.
func WithPolicyFile(path string) Option {
	return func(c *config) {
		c.hasPolicy++
		if path == "" {
			c.fail("WithPolicyFile: empty path")
		}
		c.policyPath = path
	}
}

// WithPolicy loads the policy from YAML held in memory; it is not
// watched. Give exactly one of WithPolicyFile and WithPolicy.
func WithPolicy(yaml []byte) Option {
	return func(c *config) {
		c.hasPolicy++
		if len(yaml) == 0 {
			c.fail("WithPolicy: empty policy")
		}
		c.policyData = yaml
	}
}

// WithRedisURL keeps the rate limits in the Redis at url (redis://,
// redis+sentinel://, redis+cluster://, see redisstore.NewClient), shared
// by every instance of the service. The Guard makes the client and
// closes it. An empty url is an error: a fleet without Redis would
// enforce every limit once per instance (WithInProcess says so
// explicitly).
func WithRedisURL(url string) Option {
	return func(c *config) {
		c.hasRedisURL = true
		if url == "" {
			c.fail("WithRedisURL: empty URL (REDIS_URL unset?); for one instance without Redis, use WithInProcess")
		}
		c.redisURL = url
	}
}

// WithRedisClient keeps the rate limits in Redis through client, which the
// caller made and closes after the Guard. Give it ContextTimeoutEnabled
// and no retries, as redisstore.NewClient does, or the fallback's budget
// does not bound its calls.
func WithRedisClient(client redis.UniversalClient) Option {
	return func(c *config) {
		if client == nil {
			c.fail("WithRedisClient: nil client")
		}
		c.client = client
	}
}

// WithInProcess keeps the rate limits in this process only: right for
// one instance (a single server, a test, the demo), wrong for a fleet,
// where each replica would enforce the whole limit.
func WithInProcess() Option {
	return func(c *config) { c.inProcess = true }
}

// WithService names the service (required with Redis): its live
// instances, counted by heartbeats in Redis under "fg:fleet:{name}",
// share the limits, and the instances of other services on the same
// Redis do not count. A name holds letters, digits, '-', '_' and '.'.
func WithService(name string) Option {
	return func(c *config) {
		if name == "" {
			c.fail("WithService: empty name")
		}
		for _, r := range name {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				c.fail("WithService: %q holds %q (letters, digits, '-', '_' and '.' only)", name, r)
				break
			}
		}
		c.service = name
	}
}

// WithLogger receives the policy reloads, the breaker's changes and the
// fallback's logs; the default is slog.Default(). With Redis, go-redis's
// own log lines go to it too, at debug level (redisstore.SetRedisLogger:
// go-redis has one logger per process).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("WithLogger: nil logger")
		}
		c.logger = l
	}
}

// WithMeterProvider records floodgate's metrics with mp; the default is
// otel.GetMeterProvider() when New is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.fail("WithMeterProvider: nil provider")
		}
		c.mp = mp
	}
}

// WithTracerProvider tags spans of tp; the default is
// otel.GetTracerProvider() when New is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.fail("WithTracerProvider: nil provider")
		}
		c.tp = tp
	}
}

// WithServeMux names each HTTP request by the pattern mux routes it to,
// so the policy's rules match "GET /v1/items/{id}" wherever the
// middleware is mounted (around mux, or under an outer router). Without
// it an HTTP request is named as package interceptor names it by default
// (the pattern of the ServeMux that routed it, when one did before the
// middleware).
func WithServeMux(mux *http.ServeMux) Option {
	return func(c *config) {
		if mux == nil {
			c.fail("WithServeMux: nil mux")
		}
		c.mux = mux
	}
}

// WithInterceptor passes opts to the interceptor every transport shares:
// costs, health paths, the deny body, and where identities come from
// when the policy file's identity: section cannot say (an extractor of
// your own: interceptor.WithUser(interceptor.FromHTTPRequest(...))).
// Given after the file's identity: section, an identity option here wins
// over the file's for that identity. WithServeMux and the observer are
// the Guard's own.
func WithInterceptor(opts ...interceptor.Option) Option {
	return func(c *config) { c.icOpts = append(c.icOpts, opts...) }
}

// WithStoreTimeout is the budget of one Redis call before the fallback
// decides locally; the default is fallback.DefaultTimeout.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithStoreTimeout: %v is not positive", d)
		}
		c.timeout = d
	}
}

// WithPolicyInterval sets how often WithPolicyFile's file is read for
// changes (default 1s).
func WithPolicyInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithPolicyInterval: %v is not positive", d)
		}
		c.interval = d
	}
}

// WithKeyPrefix puts prefix before every Redis key the Guard writes: the
// rate limits' buckets (redisstore.WithPrefix; they start "fg:" without
// it) and the fleet's member set ("fg:fleet:{SERVICE}" without it). The
// default is none. Give each environment sharing one Redis (staging and
// production, say) its own prefix, or their buckets and their instance
// counts mix. A prefix must not be empty and must not hold '{' or '}',
// which would change the keys' Redis Cluster hash tags; it needs Redis
// (WithRedisURL or WithRedisClient).
func WithKeyPrefix(prefix string) Option {
	return func(c *config) {
		switch {
		case prefix == "":
			c.fail("WithKeyPrefix: empty prefix (leave the option out for none)")
		case strings.ContainsAny(prefix, "{}"):
			c.fail("WithKeyPrefix: %q holds '{' or '}', which would change the keys' Redis Cluster hash tags", prefix)
		}
		c.keyPrefix = prefix
	}
}

// WithOnBreakerChange calls fn on every state change of the circuit
// breaker guarding Redis (closed, open, half-open), as it happens, next
// to the Guard's own logging and metrics of it (package fallback,
// WithOnStateChange), after them. fn runs with the breaker's lock held:
// it must be quick and must not call the Guard or its Fallback. It needs
// Redis (WithRedisURL or WithRedisClient): in process there is no
// breaker.
func WithOnBreakerChange(fn func(name string, from, to gobreaker.State)) Option {
	return func(c *config) {
		if fn == nil {
			c.fail("WithOnBreakerChange: nil func")
		}
		c.onBreaker = fn
	}
}

func newConfig(opts []Option) (*config, error) {
	c := &config{logger: slog.Default(), timeout: fallback.DefaultTimeout, interval: defaultPolicyInterval}
	for _, o := range opts {
		if o == nil {
			c.fail("nil Option")
			continue
		}
		o(c)
	}
	if c.hasPolicy != 1 {
		c.fail("give exactly one of WithPolicyFile and WithPolicy (%d given)", c.hasPolicy)
	}
	stores := 0
	for _, b := range []bool{c.inProcess, c.hasRedisURL, c.client != nil} {
		if b {
			stores++
		}
	}
	switch {
	case stores == 0:
		c.fail("no store: WithRedisURL or WithRedisClient for a fleet, WithInProcess for one instance")
	case stores > 1:
		c.fail("give one of WithRedisURL, WithRedisClient and WithInProcess")
	}
	if c.inProcess && c.keyPrefix != "" {
		c.fail("WithKeyPrefix needs Redis: WithInProcess keeps no keys")
	}
	if c.inProcess && c.onBreaker != nil {
		c.fail("WithOnBreakerChange needs Redis: WithInProcess has no breaker")
	}
	if !c.inProcess && c.service == "" {
		c.fail("WithService is required with Redis: it names the fleet whose live instances share the limits")
	}
	return c, errors.Join(c.errs...)
}

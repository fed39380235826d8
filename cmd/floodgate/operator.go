package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// stdin is where reset reads its confirmation; tests replace it.
var stdin io.Reader = os.Stdin

// operatorTimeout bounds an inspect or a reset: each is one or two calls
// to Redis.
const operatorTimeout = 10 * time.Second

// operatorFlags are the flags inspect and reset share.
type operatorFlags struct {
	fs                       *flag.FlagSet
	policy, redisURL, prefix string
	method, tier             string
	user, tenant, apiKey, ip string
	rules                    []string // reset only
	yes                      bool     // reset only
}

func newOperatorFlags(name string, stderr io.Writer) *operatorFlags {
	o := &operatorFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs := o.fs
	fs.SetOutput(stderr)
	fs.StringVar(&o.policy, "policy", "", "the policy file in force (required)")
	fs.StringVar(&o.redisURL, "redis", os.Getenv("REDIS_URL"), "Redis URL of the rate-limit state: redis://, redis+sentinel:// or redis+cluster:// (default $REDIS_URL; required)")
	fs.StringVar(&o.prefix, "key-prefix", "fg:", "the Limiter's key prefix (tiers.WithKeyPrefix)")
	fs.StringVar(&o.method, "method", "", "the method (gRPC full method or HTTP route pattern); without it, only rules that match every method apply")
	fs.StringVar(&o.user, "user", "", "the user")
	fs.StringVar(&o.tenant, "tenant", "", "the tenant")
	fs.StringVar(&o.apiKey, "api-key", "", "the API key (never printed)")
	fs.StringVar(&o.ip, "ip", "", "the client address")
	fs.StringVar(&o.tier, "tier", "", "the caller's tier, for rules that follow tiers")
	if name == "reset" {
		fs.Func("rule", "reset only this rule's buckets (repeat for several; default every rule that applies)", func(v string) error {
			o.rules = append(o.rules, v)
			return nil
		})
		fs.BoolVar(&o.yes, "yes", false, "reset without asking")
	}
	return o
}

// parse parses args and checks them; a non-negative code ends the
// command with it.
func (o *operatorFlags) parse(args []string, stderr io.Writer) (*floodgate.Request, int) {
	name := o.fs.Name()
	switch err := o.fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return nil, 0
	case err != nil:
		return nil, 2
	}
	fail := func(format string, a ...any) (*floodgate.Request, int) {
		fmt.Fprintf(stderr, "floodgate %s: "+format+"\n", append([]any{name}, a...)...)
		return nil, 2
	}
	switch {
	case o.fs.NArg() > 0:
		return fail("unexpected argument %q", o.fs.Arg(0))
	case o.policy == "":
		return fail("-policy is required")
	case o.redisURL == "":
		return fail("-redis or REDIS_URL is required: the buckets live in Redis")
	case o.user == "" && o.tenant == "" && o.apiKey == "" && o.ip == "" && o.method == "":
		return fail("name the caller: at least one of -user, -tenant, -api-key, -ip, or a -method")
	}
	r := &floodgate.Request{Method: o.method, Tier: o.tier,
		Identity: floodgate.Identity{User: o.user, Tenant: o.tenant, APIKey: o.apiKey}}
	if o.ip != "" {
		ip, err := netip.ParseAddr(o.ip)
		if err != nil {
			return fail("-ip %q is not an IP address", o.ip)
		}
		r.Identity.IP = ip
	}
	return r, -1
}

// limiter loads the policy and connects to Redis. The store is wrapped
// in a local-first store, so a policy with leased or
// async rules loads too; inspect and reset read and reset the buckets in
// Redis exactly.
func (o *operatorFlags) limiter(stderr io.Writer) (*tiers.Limiter, func(), int) {
	name := o.fs.Name()
	f, err := policyfile.LoadFile(o.policy)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate %s: %v\n", name, err)
		return nil, nil, 1
	}
	client, err := redisstore.NewClient(o.redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate %s: -redis: %v\n", name, err)
		return nil, nil, 2
	}
	rs, err := redisstore.New(client, redisstore.WithBatching(0, 0))
	if err != nil {
		client.Close()
		fmt.Fprintf(stderr, "floodgate %s: %v\n", name, err)
		return nil, nil, 1
	}
	lf, err := localfirst.New(rs, rs)
	if err != nil {
		client.Close()
		fmt.Fprintf(stderr, "floodgate %s: %v\n", name, err)
		return nil, nil, 1
	}
	closeAll := func() {
		_ = lf.Close(context.Background())
		_ = client.Close()
	}
	// The Limiter admits no request here, so what it would do for one
	// when Redis fails (the warning about on_store_error local without a
	// fallback) is no concern of an operator's: a failed read or reset is
	// reported as an error.
	old := slog.Default()
	slog.SetDefault(slog.New(slog.DiscardHandler))
	l, err := tiers.NewLimiter(lf, f.Limits, tiers.WithKeyPrefix(o.prefix))
	slog.SetDefault(old)
	if err != nil {
		closeAll()
		fmt.Fprintf(stderr, "floodgate %s: %v\n", name, err)
		return nil, nil, 1
	}
	return l, closeAll, -1
}

func runInspect(args []string, stdout, stderr io.Writer) int {
	o := newOperatorFlags("inspect", stderr)
	o.fs.Usage = func() {
		fmt.Fprint(o.fs.Output(), "usage: floodgate inspect -policy POLICY.yaml [-redis URL] [-method M] [-user U] [-tenant T] [-api-key K] [-ip IP] [-tier T]\n\n"+
			"Shows every rule of the policy that applies to the caller, with its bucket's key, remaining units and\n"+
			"time to full, read from Redis without charging. Exits 1 when no rule applies.\n\n")
		o.fs.PrintDefaults()
	}
	ctx, cancel := context.WithTimeout(context.Background(), operatorTimeout)
	defer cancel()
	in, code := o.inspect(ctx, "inspect", args, stderr)
	if code >= 0 {
		return code
	}
	defer in.close()
	writeStates(stdout, in.states)
	return 0
}

// inspected is what both commands start from: the caller's request, the
// Limiter over the store, and the caller's buckets as read.
type inspected struct {
	r      *floodgate.Request
	l      *tiers.Limiter
	states []tiers.BucketState
	close  func()
}

// inspect parses the flags, builds the Limiter and reads the caller's
// buckets without charging; a code >= 0 is the command's exit code.
func (o *operatorFlags) inspect(ctx context.Context, name string, args []string, stderr io.Writer) (inspected, int) {
	r, code := o.parse(args, stderr)
	if code >= 0 {
		return inspected{}, code
	}
	l, closeAll, code := o.limiter(stderr)
	if code >= 0 {
		return inspected{}, code
	}
	states, err := l.Inspect(ctx, r)
	if err != nil {
		closeAll()
		fmt.Fprintf(stderr, "floodgate %s: %v\n", name, err)
		return inspected{}, 1
	}
	return inspected{r: r, l: l, states: states, close: closeAll}, -1
}

func runReset(args []string, stdout, stderr io.Writer) int {
	o := newOperatorFlags("reset", stderr)
	o.fs.Usage = func() {
		fmt.Fprint(o.fs.Output(), "usage: floodgate reset -policy POLICY.yaml [-redis URL] [-method M] [-user U] [-tenant T] [-api-key K] [-ip IP] [-tier T] [-rule NAME]... [-yes]\n\n"+
			"Restores to full the buckets of the rules that apply to the caller (those named by -rule, or all),\n"+
			"after showing them and asking unless -yes, and logs each bucket it reset. Exits 1 when no rule applies.\n\n")
		o.fs.PrintDefaults()
	}
	ctx, cancel := context.WithTimeout(context.Background(), operatorTimeout)
	defer cancel()
	in, code := o.inspect(ctx, "reset", args, stderr)
	if code >= 0 {
		return code
	}
	defer in.close()
	r, l, states := in.r, in.l, in.states
	if len(o.rules) > 0 {
		var missing []string
		for _, name := range o.rules {
			if !slices.ContainsFunc(states, func(s tiers.BucketState) bool { return s.Rule == name }) {
				missing = append(missing, fmt.Sprintf("%q", name))
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(stderr, "floodgate reset: %v: %s to this caller (the rules that apply: %s)\n",
				tiers.ErrNoRule, strings.Join(missing, ", "), ruleNames(states))
			return 1
		}
		states = slices.DeleteFunc(states, func(s tiers.BucketState) bool { return !slices.Contains(o.rules, s.Rule) })
	}
	writeStates(stdout, states)
	if !o.yes && !confirm(stdout, len(states)) {
		fmt.Fprintln(stderr, "floodgate reset: nothing reset")
		return 1
	}
	done, err := l.Reset(ctx, r, o.rules...)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate reset: %v\n", err)
		return 1
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	before := make(map[string]int64, len(states))
	for _, s := range states {
		before[s.Key] = s.Remaining
	}
	for _, s := range done {
		log.Info("floodgate reset: bucket restored to full", "rule", s.Rule, "key", s.Key,
			"remaining_before", before[s.Key], "capacity", s.Limit.Capacity())
	}
	fmt.Fprintf(stdout, "reset %d %s\n", len(done), plural(len(done), "bucket", "buckets"))
	return 0
}

// confirm asks on stdout whether to reset n buckets and reads the answer
// from stdin: only y or yes resets.
func confirm(stdout io.Writer, n int) bool {
	what := fmt.Sprintf("these %d buckets", n)
	if n == 1 {
		what = "this bucket"
	}
	fmt.Fprintf(stdout, "reset %s to full? [y/N] ", what)
	line, _ := bufio.NewReader(stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

// writeStates prints one line per bucket.
func writeStates(w io.Writer, states []tiers.BucketState) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKEY\tLIMIT\tREMAINING\tFULL IN\tSOURCE")
	for _, s := range states {
		rule := s.Rule
		if s.Shadow {
			rule += " (shadow)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", rule, s.Key, limitString(s.Limit), s.Remaining, s.Limit.Capacity(),
			s.Reset.Round(time.Millisecond), s.Source)
	}
	tw.Flush()
}

// limitString writes a limit as the policy does: "10/1m0s token_bucket
// burst 20".
func limitString(l quota.Limit) string {
	s := fmt.Sprintf("%d/%s %s", l.Rate, l.Period, l.Algorithm)
	if l.Algorithm == quota.TokenBucket || l.Algorithm == quota.GCRA {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

func ruleNames(states []tiers.BucketState) string {
	var names []string
	for _, s := range states {
		if !slices.Contains(names, s.Rule) {
			names = append(names, s.Rule)
		}
	}
	return strings.Join(names, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Command floodgate is floodgate's command line.
//
//	floodgate demo [-duration 20s] [-redis URL | -redis-fault kill@AT[:FOR] | -redis-fault pause@AT[:FOR]] [-compare 4s|off] [-report FILE]
//	floodgate validate POLICY.yaml...
//	floodgate inspect -policy POLICY.yaml [-redis URL] [-method M] [-user U] [-tenant T] [-api-key K] [-ip IP] [-tier T]
//	floodgate reset -policy POLICY.yaml [-redis URL] [-method M] [-user U] ... [-rule NAME]... [-yes]
//	floodgate top -url http://HOST:PORT/PATH [-rule NAME] [-n 10] [-watch 2s]
//
// demo starts an HTTP and a gRPC service in-process, protected by the whole
// floodgate chain (priority load shedder, in-flight caps, hierarchical rate
// limits with plan tiers), drives mixed traffic at them, prints live progress
// and a table, and writes a self-contained HTML report. Rate-limit state is
// kept in process unless REDIS_URL (or -redis) names a Redis server.
// -redis-fault starts the demo's own redis-server on a free loopback port
// (redis-server must be installed) and kills (SIGKILL) or pauses (SIGSTOP)
// it AT after the start of traffic; with FOR it comes back FOR later (a new,
// empty server after a kill; SIGCONT after a pause): `-redis-fault kill@8s`,
// `-redis-fault pause@8s:3s`. After the main run, the demo drives an
// overloaded service three times (a fixed shedder capacity, an adaptive
// one, an adaptive concurrency limit) and reports them side by side;
// -compare sets each run's length (default a fifth of -duration, at least
// 2s), -compare off leaves the comparison out.
//
// validate checks policy files, their rate limits and their shedder: and
// concurrency: sections (package policyfile), and prints every error with
// its field and line; it exits 1 if any file is invalid. For a valid file
// it notes what an operator should know before deploying it: a shadow
// policy (denies nothing), rules enforced for a share of their keys
// (enforce_percent), in shadow or soft (admitting over their limit, the
// call marked), the headers the policy reads, and the stages its other
// sections set.
//
// inspect and reset are for a support engineer whose customer is wrongly
// blocked. inspect shows every rule of the policy that applies to a
// caller (an identity: -user, -tenant, -api-key, -ip, and -tier; and
// optionally a -method: without one, only rules that match every method
// apply), with its bucket's key, remaining units and time until full,
// read from Redis (-redis or REDIS_URL, in any of its three forms:
// redis://, redis+sentinel://, redis+cluster://) without charging
// anything (tiers.Limiter.Inspect). reset shows the same, asks before
// restoring them to full unless -yes, and logs each bucket it reset
// (tiers.Limiter.Reset); -rule limits it to the rules named. Both exit 1,
// naming the caller, when no rule applies, or a -rule is no rule that
// applies.
//
// top answers what an operator asks first in an incident: who is denied
// right now. It reads a running service's denial endpoint (the handler of
// guard.Guard.TopDeniedHandler, served on an admin listener) and prints,
// per rule, the principals it denied most over the last minute (the user,
// tenant, API key (hashed) or client address the rule keys on), with each
// count's error bound and its share of the rule's denials; the rules with
// the most denials come first. -rule shows one rule (or per-key cap), -n
// how many principals per rule (default 10, at most 64), and -watch reads
// again every interval until interrupted. It exits 1 when the endpoint
// cannot be read or answers an error (a rule the policy does not have),
// naming why. `floodgate demo` serves such an endpoint and prints its URL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/demo"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  floodgate demo [-duration 20s] [-redis URL | -redis-fault kill@AT[:FOR] | -redis-fault pause@AT[:FOR]] [-compare 4s|off] [-report FILE]
  floodgate validate POLICY.yaml...
  floodgate inspect -policy POLICY.yaml [-redis URL] [-method M] [-user U] [-tenant T] [-api-key K] [-ip IP] [-tier T]
  floodgate reset -policy POLICY.yaml [-redis URL] [-method M] [-user U] ... [-rule NAME]... [-yes]
  floodgate top -url http://HOST:PORT/PATH [-rule NAME] [-n 10] [-watch 2s]
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "validate":
		return runValidate(args[1:], stdout, stderr)
	case "inspect":
		return runInspect(args[1:], stdout, stderr)
	case "reset":
		return runReset(args[1:], stdout, stderr)
	case "top":
		return runTop(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q\n%s", args[0], usage)
	return 2
}

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: floodgate validate POLICY.yaml...\n\nChecks each policy and prints every error with its field and line; exits 1 if any is invalid.\n")
	}
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	}
	args = fs.Args()
	if len(args) == 0 {
		fmt.Fprint(stderr, "floodgate validate: name at least one policy file\n")
		return 2
	}
	code := 0
	for _, path := range args {
		f, err := policyfile.LoadFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "%s: invalid\n", path)
			var pe *tiers.PolicyError
			if errors.As(err, &pe) {
				for _, e := range pe.Unwrap() {
					fmt.Fprintf(stderr, "  %v\n", e)
				}
			} else {
				fmt.Fprintf(stderr, "  %v\n", err)
			}
			code = 1
			continue
		}
		p := f.Limits
		fmt.Fprintf(stdout, "%s: ok (%d rules, %d tiers, %d overrides)\n", path, len(p.Rules), len(p.Tiers), len(p.Overrides))
		for _, note := range append(policyNotes(p), stageNotes(f)...) {
			fmt.Fprintf(stdout, "  %s\n", note)
		}
	}
	return code
}

// policyNotes are what an operator should know of a valid policy before
// deploying it: that it denies nothing (shadow), which rules deny for a
// share of their keys only (enforce_percent), which admit over their
// limit and mark the call (soft), which are decided locally
// (consistency leased or async: they need a local-first store), which
// settle their cost or wait instead of denying (settle, max_wait: they
// need a store that settles), and which headers, chosen by clients, it
// reads.
func policyNotes(p *tiers.Policy) []string {
	var notes []string
	if p.Shadow {
		notes = append(notes, "shadow: every rule is decided and reported, none denies")
	}
	headers := map[string]bool{}
	for _, r := range p.Rules {
		if r.EnforcePercent > 0 && r.EnforcePercent < 100 && !r.Shadow && !p.Shadow {
			notes = append(notes, fmt.Sprintf("rule %s: enforced for %d%% of its keys, reported only for the others", r.Name, r.EnforcePercent))
		}
		if r.Shadow && !p.Shadow {
			notes = append(notes, fmt.Sprintf("rule %s: shadow, reported only", r.Name))
		}
		if r.Soft && !p.Shadow {
			notes = append(notes, fmt.Sprintf("rule %s: soft, admits a call over its limit and marks it (X-RateLimit-Soft-Exceeded, Request.SoftExceeded, floodgate.soft_exceeded), charging it nothing there", r.Name))
		}
		switch r.Consistency {
		case quota.Leased:
			notes = append(notes, fmt.Sprintf("rule %s: leased, decided locally from units leased from the store, never over the limit (needs a tiers/localfirst store: a Limiter over any other refuses it)", r.Name))
		case quota.Async:
			iv := r.SyncInterval
			if iv == 0 {
				iv = tiers.DefaultSyncInterval
			}
			notes = append(notes, fmt.Sprintf("rule %s: async, decided locally and reported every %s or later, may admit over the limit by its documented bound (needs a tiers/localfirst store: a Limiter over any other refuses it)", r.Name, iv))
		}
		switch {
		case r.Settle && r.Meter != "":
			notes = append(notes, fmt.Sprintf("rule %s: settles meter %s, charged its cost or the meter's estimate when admitted and corrected to the value the handler reports for %s (floodgate.ReportMeter) when it ends", r.Name, r.Meter, r.Meter))
		case r.Settle:
			notes = append(notes, fmt.Sprintf("rule %s: settles, charged its cost when admitted and corrected to the request's actual cost when it ends", r.Name))
		}
		if r.MaxWait > 0 {
			waiters := r.MaxWaiters
			if waiters == 0 {
				waiters = tiers.DefaultMaxWaiters
			}
			notes = append(notes, fmt.Sprintf("rule %s: waits up to %s for its units instead of denying, at most %d requests of a bucket at once per process", r.Name, r.MaxWait, waiters))
		}
		for h := range r.Match.Header {
			headers[strings.ToLower(h)] = true
		}
		for _, h := range r.KeyHeaders {
			headers[strings.ToLower(h)] = true
		}
	}
	if len(headers) > 0 {
		names := make([]string, 0, len(headers))
		for h := range headers {
			names = append(names, h)
		}
		slices.Sort(names)
		notes = append(notes, "reads headers "+strings.Join(names, ", ")+" (clients choose them: they select and split limits, they are no identity)")
	}
	return notes
}

// stageNotes say which stages a valid file's shedder: and concurrency:
// sections set: a service must give each to policyfile.Watch, which
// refuses the file otherwise.
func stageNotes(f *policyfile.File) []string {
	var notes []string
	for _, s := range []struct {
		set  bool
		what string
	}{
		{f.Shedder != nil, "shedder: sets a shedder.Shedder's capacity and thresholds (policyfile.Targets.Shedder)"},
		{f.Fleet != nil, "shedder.fleet: sets a fleetshed.Shedder's capacity (policyfile.Targets.Fleet)"},
		{f.Global > 0, "concurrency.global: sets a concurrency.Limiter's global cap (policyfile.Targets.Concurrency)"},
		{len(f.PerKey) > 0, "concurrency.per_key: sets the per-key caps a concurrency.Limiter was built with, by name (policyfile.Targets.Concurrency)"},
		{f.Wait != nil, "concurrency.wait: sets how long a concurrency.Limiter's requests wait for a slot (policyfile.Targets.Concurrency)"},
		{f.Adaptive != nil, "concurrency.adaptive: sets a concurrency.Adaptive's limit (policyfile.Targets.Adaptive)"},
	} {
		if s.set {
			notes = append(notes, s.what)
		}
	}
	for _, fa := range []struct {
		path string
		f    *floodgate.Fairness
	}{{"shedder.fairness", shedderFairness(f)}, {"shedder.fleet.fairness", fleetFairness(f)}, {"concurrency.wait.fairness", waitFairness(f.Wait)}} {
		if fa.f != nil {
			notes = append(notes, fairnessNote(fa.path, fa.f))
		}
	}
	if f.Outbound != nil {
		notes = append(notes, fmt.Sprintf("outbound: %d rules on the service's outgoing calls, and the fleet-wide cooldown when a peer refuses one (guard.Guard.RoundTripper, DialOptions; policyfile.Targets.Outbound)", len(f.Outbound.Rules)))
		for _, n := range policyNotes(f.Outbound) {
			notes = append(notes, "outbound "+n)
		}
	}
	return notes
}

func shedderFairness(f *policyfile.File) *floodgate.Fairness {
	if f.Shedder == nil {
		return nil
	}
	return f.Shedder.Fairness
}

func fleetFairness(f *policyfile.File) *floodgate.Fairness {
	if f.Fleet == nil {
		return nil
	}
	return f.Fleet.Fairness
}

func waitFairness(w *concurrency.Wait) *floodgate.Fairness {
	if w == nil {
		return nil
	}
	return w.Fairness
}

// fairnessNote says how a fairness shares its stage among callers.
func fairnessNote(path string, f *floodgate.Fairness) string {
	s := path + ": shares each priority among callers by " + f.By
	if len(f.Weights) == 0 {
		return s + ", each weighing 1 (the transport must fill the " + f.By + ")"
	}
	tiers := make([]string, 0, len(f.Weights))
	for t := range f.Weights {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	for i, t := range tiers {
		tiers[i] = t + " " + strconv.FormatFloat(f.Weights[t], 'g', -1, 64)
	}
	return s + ", weighted by plan tier (" + strings.Join(tiers, ", ") + "; other tiers 1; the transport must fill the " + f.By + ")"
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 20*time.Second, "how long to drive traffic")
	redisURL := fs.String("redis", os.Getenv("REDIS_URL"), "Redis URL for rate-limit state (default $REDIS_URL; empty: in-process)")
	reportPath := fs.String("report", "floodgate-demo-report.html", "where to write the HTML report (empty: none)")
	verbose := fs.Bool("v", false, "log the library's warnings (breaker state changes, fallback) to stderr")
	var compare time.Duration
	skipCompare := false
	fs.Func("compare", "length of each run of the adaptive-vs-fixed overload comparison after the main run (at least 1s; default a fifth of -duration, at least 2s), or off", func(v string) error {
		if v == "off" {
			skipCompare = true
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return fmt.Errorf("%q is not a duration of at least 1s, or off", v)
		}
		compare, skipCompare = d, false
		return nil
	})
	var fault *demo.Fault
	fs.Func("redis-fault", "start the demo's own redis-server and break it: "+demo.FaultSyntax, func(v string) error {
		f, err := demo.ParseFault(v)
		if err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "demo: "))
		}
		fault = &f
		return nil
	})
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "floodgate demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *duration <= 0 { // demo.Config's 0 is its default; a flag of 0 is a mistake
		fmt.Fprintf(stderr, "floodgate demo: -duration %s must be at least 1s\n", *duration)
		return 2
	}
	cfg := demo.Config{Duration: *duration, RedisURL: *redisURL, Progress: stdout, Fault: fault, Compare: compare, SkipCompare: skipCompare}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "floodgate %v\n", err)
		return 2
	}
	if *redisURL != "" && fault == nil {
		// A URL that cannot name a Redis is a usage error, before anything
		// starts (a server that does not answer is found by the run).
		from := "REDIS_URL"
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "redis" {
				from = "-redis"
			}
		})
		c, err := redisstore.NewClient(*redisURL)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate demo: %s: %v\n", from, err)
			return 2
		}
		_ = c.Close()
	}
	var logger *slog.Logger
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}

	cfg.Logger = logger
	store := "the in-process memory store"
	switch {
	case fault != nil:
		store = "a redis-server the demo starts (fault " + fault.String() + ")"
	case *redisURL != "":
		store = "Redis at " + redisstore.Redact(*redisURL)
	}
	fmt.Fprintf(stdout, "floodgate demo: %s of traffic against an HTTP and a gRPC service on loopback, rate-limit state in %s\n\n", *duration, store)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := demo.Run(ctx, cfg)
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "floodgate demo: interrupted")
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "floodgate %v\n", err) // demo's errors start with "demo: "
		return 1
	}
	fmt.Fprintf(stdout, "\nWhat each group of traffic met (store: %s):\n\n", rep.Store)
	if err := rep.WriteTable(stdout); err != nil {
		fmt.Fprintf(stderr, "floodgate demo: %v\n", err)
		return 1
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(stdout, "  "+n)
	}
	fmt.Fprintln(stdout, "\nWhat this run shows:")
	for _, c := range rep.Captions() {
		fmt.Fprintf(stdout, "  %s: %s\n", c.Title, c.Text)
	}
	if *reportPath != "" {
		f, err := os.Create(*reportPath)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate demo: %v\n", err)
			return 1
		}
		if err := rep.WriteHTML(f); err != nil {
			f.Close()
			fmt.Fprintf(stderr, "floodgate demo: writing %s: %v\n", *reportPath, err)
			return 1
		}
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "floodgate demo: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nHTML report: %s\n", *reportPath)
	}
	return 0
}

// Command vendor measures the guard's outbound limits: -procs separate OS
// processes (like the replicas of a service) call one fake vendor on
// loopback that allows -vendor-rate calls/s (a token bucket of burst
// -vendor-burst) and answers 429 with Retry-After (the whole seconds until
// its next token, at least 1) beyond it. The fleet offers -offered calls/s
// in all (-offered/-procs per process, on a fixed schedule, open loop) for
// -dur, once per mode:
//
//   - none: today's client, a plain http.Client with a naive per-process
//     back-off: after a 429 the process sends nothing until the
//     Retry-After it got has passed;
//   - guard: the same client with guard.RoundTripper, the policy's
//     outbound rule of -rule-rate/s burst -rule-burst for the whole fleet
//     in one redis-server (this program's own, on a free loopback port) and
//     the fleet-wide cooldown;
//   - cooldown: the guard without the rule: only the shared cooldown acts.
//
// Per mode it prints what the fleet offered and sent, what the vendor
// accepted and refused (429), the refused share of what was sent, and the
// most calls the vendor received in one second (windows of 1 s from the
// common start) beside -vendor-rate + -vendor-burst.
//
// What this program decides: nothing of the library; the exit status is 1
// when the guard row's 429s exceed 1% of its calls sent or one of its
// seconds exceeds rate + burst.
//
//	cd bench && go run ./cmd/vendor
//	cd bench && go run ./cmd/vendor -procs 8 -offered 200 -dur 20s -modes none,guard,cooldown
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/bench/internal/child"
	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

const serveFlag = "-vendor-client"

var modes = []string{"none", "guard", "cooldown"}

func main() {
	child.ServeIfAsked(serveFlag, serve)
	if err := run(os.Args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "vendor:", err)
		os.Exit(1)
	}
}

type config struct {
	procs                  int
	offered                float64
	dur, timeout, maxWait  time.Duration
	vendorRate, ruleRate   float64
	vendorBurst, ruleBurst int
	modes                  []string
	onStoreError           string
	sync                   time.Duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&c.procs, "procs", 8, "client processes (replicas)")
	fs.Float64Var(&c.offered, "offered", 200, "calls/s the whole fleet offers")
	fs.DurationVar(&c.dur, "dur", 20*time.Second, "how long each mode offers calls")
	fs.Float64Var(&c.vendorRate, "vendor-rate", 50, "calls/s the vendor allows")
	fs.IntVar(&c.vendorBurst, "vendor-burst", 10, "the vendor's burst")
	fs.Float64Var(&c.ruleRate, "rule-rate", 50, "guard mode: the outbound rule's calls/s, for the whole fleet")
	fs.IntVar(&c.ruleBurst, "rule-burst", 5, "guard mode: the outbound rule's burst, below the vendor's by what the calls' transit times vary (rate × spread: 5 is 100ms at 50/s)")
	fs.DurationVar(&c.maxWait, "max-wait", 0, "guard mode: the rule's max_wait (0: a call over the rule is refused at once)")
	fs.StringVar(&c.onStoreError, "on-store-error", "local", "guard mode: the rule's on_store_error (local, open or closed)")
	fs.DurationVar(&c.sync, "sync", 100*time.Millisecond, "guard and cooldown modes: outbound.cooldown.sync, how stale a process's view of the fleet's cooldown may be (its default)")
	m := fs.String("modes", strings.Join(modes, ","), "modes to run, comma separated: none, guard, cooldown")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "bound on the whole program")
	if err := fs.Parse(args[1:]); err != nil {
		return c, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if c.procs < 1 || c.procs > 64 {
		errs = append(errs, fmt.Errorf("-procs %d: want 1 to 64", c.procs))
	}
	if c.offered <= 0 || c.offered > 10000 || c.vendorRate <= 0 || c.ruleRate <= 0 || c.ruleRate != math.Trunc(c.ruleRate) {
		errs = append(errs, fmt.Errorf("-offered %v, -vendor-rate %v, -rule-rate %v: want positive (offered at most 10000, rule-rate whole)", c.offered, c.vendorRate, c.ruleRate))
	}
	if c.vendorBurst < 1 || c.ruleBurst < 1 {
		errs = append(errs, fmt.Errorf("-vendor-burst %d, -rule-burst %d: want at least 1", c.vendorBurst, c.ruleBurst))
	}
	if !slices.Contains([]string{"local", "open", "closed"}, c.onStoreError) {
		errs = append(errs, fmt.Errorf("-on-store-error %q: want local, open or closed", c.onStoreError))
	}
	if c.sync <= 0 || c.sync > 10*time.Second {
		errs = append(errs, fmt.Errorf("-sync %v: want (0, 10s]", c.sync))
	}
	if c.dur < time.Second || c.dur > 10*time.Minute || c.maxWait < 0 || c.maxWait > time.Minute {
		errs = append(errs, fmt.Errorf("-dur %v (1s to 10m), -max-wait %v (0 to 1m)", c.dur, c.maxWait))
	}
	for _, s := range strings.Split(*m, ",") {
		if s = strings.TrimSpace(s); !slices.Contains(modes, s) {
			errs = append(errs, fmt.Errorf("-modes: unknown mode %q (want none, guard, cooldown)", s))
		} else {
			c.modes = append(c.modes, s)
		}
	}
	return c, errors.Join(errs...)
}

// clientConfig is what a client process is told.
type clientConfig struct {
	Mode      string
	VendorURL string
	RedisURL  string
	Service   string
	Policy    string
	Rate      float64 // calls/s of this process
	Start     int64   // unix ns: when every process starts offering
	Dur       time.Duration
}

// clientStats is what a client process reports.
type clientStats struct {
	Offered, Sent, OK, Refused429, NotSent, BackedOff, Errors int64
	ErrSample                                                 string
}

func run(args []string, stdout io.Writer) error {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	addr, stop, err := redistest.StartProcess()
	if err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	fmt.Fprintf(stdout, "vendor: %d processes offering %.0f calls/s in all for %v; vendor %.0f/s burst %d; redis-server at %s\n",
		cfg.procs, cfg.offered, cfg.dur, cfg.vendorRate, cfg.vendorBurst, addr)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\toffered\tsent\taccepted\t429s\t429/sent\tnot sent\tmax sent/1s\trate+burst\tredis takes\tredis GETs\t")
	fail := false
	for i, mode := range cfg.modes {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
		r, err := runMode(ctx, cfg, mode, "redis://"+addr, i)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		takes, gets, err := commands(ctx, rdb)
		if err != nil {
			return err
		}
		share := 0.0
		if r.sent > 0 {
			share = 100 * float64(r.refused) / float64(r.sent)
		}
		bound := cfg.vendorRate + float64(cfg.vendorBurst)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.2f%%\t%d\t%d\t%.0f\t%d\t%d\t\n", mode, r.offered, r.sent, r.accepted, r.refused, share, r.notSent, r.maxSecond, bound, takes, gets)
		if mode == "guard" && (share > 1 || float64(r.maxSecond) > bound) {
			fail = true
		}
		if r.errors > 0 {
			fmt.Fprintf(os.Stderr, "vendor: %s: %d calls failed (%s)\n", mode, r.errors, r.errSample)
		}
	}
	_ = tw.Flush()
	if fail {
		return errors.New("the guard row missed its target (429s at most 1% of calls sent, at most rate + burst a second)")
	}
	return nil
}

// commands reads how many rate-limit takes (script calls) and GETs (the
// cooldown's reads) Redis ran since its stats were reset.
func commands(ctx context.Context, rdb *redis.Client) (takes, gets int64, err error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall":
			takes += n
		case "cmdstat_get":
			gets += n
		}
	}
	return takes, gets, nil
}

type result struct {
	offered, sent, accepted, refused, notSent, errors int64
	maxSecond                                         int
	errSample                                         string
}

func runMode(ctx context.Context, cfg config, mode, redisURL string, n int) (result, error) {
	v := newVendor(cfg.vendorRate, cfg.vendorBurst)
	start := time.Now().Add(2 * time.Second) // every process is built by then
	v.start = start                          // before the vendor serves: its handler reads it
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	srv := &http.Server{Handler: v, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	cc := clientConfig{
		Mode: mode, VendorURL: "http://" + lis.Addr().String(), RedisURL: redisURL,
		Service: "vendor-" + strconv.Itoa(n), Policy: policy(cfg, mode),
		Rate: cfg.offered / float64(cfg.procs), Start: start.UnixNano(), Dur: cfg.dur,
	}
	children := make([]*child.Child, 0, cfg.procs)
	defer func() {
		for _, c := range children {
			_ = c.Stop(&clientStats{})
		}
	}()
	for range cfg.procs {
		c, err := child.Start(ctx, "vendor", serveFlag, cc)
		if err != nil {
			return result{}, err
		}
		children = append(children, c)
	}
	select { // the processes offer until start + dur, then report
	case <-time.After(time.Until(start.Add(cfg.dur))):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	var r result
	for _, c := range children {
		var st clientStats
		err := c.Stop(&st)
		if err != nil {
			return result{}, err
		}
		r.offered += st.Offered
		r.sent += st.Sent
		r.notSent += st.NotSent + st.BackedOff
		r.errors += st.Errors
		if st.ErrSample != "" {
			r.errSample = st.ErrSample
		}
	}
	children = nil
	r.accepted, r.refused, r.maxSecond = v.totals()
	return r, nil
}

// policy is the guard's policy of a mode: the rule and the cooldown, or
// the cooldown alone.
func policy(cfg config, mode string) string {
	p := fmt.Sprintf("rules: []\noutbound:\n  cooldown: {default: 1s, max: 10s, sync: %s}\n", cfg.sync)
	if mode == "guard" {
		p += fmt.Sprintf("  rules:\n    - name: vendor\n      match: {method: \"/127.0.0.1:*/v1/*\"}\n      rate: %d/1s\n      burst: %d\n",
			int64(cfg.ruleRate), cfg.ruleBurst)
		p += "      on_store_error: " + cfg.onStoreError + "\n"
		if cfg.maxWait > 0 {
			p += fmt.Sprintf("      max_wait: %s\n", cfg.maxWait)
		}
	}
	return p
}

// vendor is the fake third party: a token bucket of rate/s and burst,
// counting what it accepted and refused, and what arrived in each second
// from start.
type vendor struct {
	mu       sync.Mutex
	rate     float64
	burst    float64
	tokens   float64
	last     time.Time
	start    time.Time
	accepted int64
	refused  int64
	perSec   map[int]int
}

func newVendor(rate float64, burst int) *vendor {
	return &vendor{rate: rate, burst: float64(burst), tokens: float64(burst), perSec: map[int]int{}}
}

func (v *vendor) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	v.mu.Lock()
	now := time.Now() // under the lock: arrivals are counted in time order
	if !v.last.IsZero() {
		v.tokens = min(v.burst, v.tokens+now.Sub(v.last).Seconds()*v.rate)
	}
	v.last = now
	if s := now.Sub(v.start); s >= 0 {
		v.perSec[int(s/time.Second)]++
	}
	ok := v.tokens >= 1
	wait := 0.0
	if ok {
		v.tokens--
		v.accepted++
	} else {
		v.refused++
		wait = (1 - v.tokens) / v.rate
	}
	v.mu.Unlock()
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait)))))
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

func (v *vendor) totals() (accepted, refused int64, maxSecond int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, n := range v.perSec {
		maxSecond = max(maxSecond, n)
	}
	return v.accepted, v.refused, maxSecond
}

// serve is a client process: it offers its calls on a fixed schedule from
// the common start for the run's duration, then reports.
func serve(args []string, stdin io.Reader, stdout io.Writer) error {
	var cc clientConfig
	if err := child.Config("vendor", args, &cc); err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var g *guard.Guard
	if cc.Mode != "none" {
		var err error
		g, err = guard.New(context.Background(), guard.WithPolicy([]byte(cc.Policy)),
			guard.WithRedisURL(cc.RedisURL), guard.WithService(cc.Service), guard.WithKeyPrefix(cc.Service+":"))
		if err != nil {
			return err
		}
		defer g.Close(context.Background())
		client.Transport = g.RoundTripper(client.Transport)
	}
	child.Listening(stdout, "client")
	st := offer(client, cc)
	child.AwaitStop(stdin)
	return child.Report(stdout, st)
}

// offer sends the process's calls: one every 1/Rate from Start, each in a
// goroutine of its own, for Dur; at most 512 in flight.
func offer(client *http.Client, cc clientConfig) *clientStats {
	var st clientStats
	var backoff atomic.Int64 // none: unix ns until which this process sends nothing
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 512)
	every := time.Duration(float64(time.Second) / cc.Rate)
	start := time.Unix(0, cc.Start)
	total := int(cc.Dur / every)
	for i := range total {
		time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
		atomic.AddInt64(&st.Offered, 1)
		if cc.Mode == "none" && time.Now().UnixNano() < backoff.Load() {
			atomic.AddInt64(&st.BackedOff, 1)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			atomic.AddInt64(&st.Errors, 1)
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			resp, err := client.Get(cc.VendorURL + "/v1/chat")
			switch {
			case interceptor.IsClientThrottled(err):
				atomic.AddInt64(&st.NotSent, 1)
			case err != nil:
				atomic.AddInt64(&st.Errors, 1)
				mu.Lock()
				st.ErrSample = err.Error()
				mu.Unlock()
			default:
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				atomic.AddInt64(&st.Sent, 1)
				if resp.StatusCode == http.StatusTooManyRequests {
					atomic.AddInt64(&st.Refused429, 1)
					if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
						backoff.Store(time.Now().Add(time.Duration(s) * time.Second).UnixNano())
					}
				} else {
					atomic.AddInt64(&st.OK, 1)
				}
			}
		}()
	}
	wg.Wait()
	return &st
}

// Command guardfleet runs six copies of an HTTP service on one
// redis-server of its own (a free loopback port), offers them 300
// requests/s round robin for 20 s under one rule of 50/s burst 50, kills
// Redis 7 s in and starts it again (empty) 5 s later, and prints what the
// fleet admitted against what the limit allows, and how much of it while
// Redis was down, beside package fallback's bound for an outage of T
// seconds: C + r·T (capacity 50, rate 50/s: 300 for 5 s).
//
// -fault stop SIGSTOPs Redis instead (for -down, then SIGCONT) and prints,
// for each second from the stop on, what the requests sent in it waited
// (p99 and max): with the README's service, a stalled Redis costs a
// request no more than a healthy call's budget once the store's breaker
// has opened, within the first second of the stall.
//
// -mode readme is the README's first screen as a user copies it: its
// policy.yaml and its HTTP service's main.go, taken from README.md,
// written into a fresh module in a temporary directory outside the
// repository (a replace directive to this checkout), built there with
// the go command and run as six processes. Load goes to its
// items-per-user rule (GET /v1/items/7, one user). -mode old wires the
// service as the README's Redis snippet did before package guard
// (fallback.New(store) without WithInstances: each process holds the
// whole limit while Redis is down).
//
//	cd bench && go run ./cmd/guardfleet -mode readme
//	cd bench && go run ./cmd/guardfleet -mode old
//	cd bench && go run ./cmd/guardfleet -procs 1 -offered 200 -fault stop -kill-at 4s -down 10s -dur 16s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// oldPolicy is -mode old's rule: the README's items-per-user rate on
// every request.
const oldPolicy = `
rules:
  - name: all
    rate: 50/1s
    burst: 50
`

// The rule both modes limit by: capacity and rate per second.
const capacity, rate = 50, 50

// config is one run.
type config struct {
	mode              string
	procs             int
	offered           int // requests/s, the whole fleet
	dur, killAt, down time.Duration
	warmup            time.Duration // after every process listens, before load
	fault             string        // "kill" (restarted empty) or "stop" (SIGSTOP, then SIGCONT)
	verbose           bool
}

// result is what a run measured.
type result struct {
	admitted, denied, failed int64
	downAdmitted             int64         // admitted while Redis was down
	downFor                  time.Duration // from the kill to the restart
	elapsed                  time.Duration
	seconds                  []second // -fault stop: each second from the stop on
}

// second is what the requests sent in one second of a run waited.
type second struct {
	sent     int
	p99, max time.Duration
}

// bound is package fallback's bound on what the fleet admits locally in
// an outage of the run's length: C + r·T.
func (r result) bound() float64 { return capacity + rate*r.downFor.Seconds() }

func main() {
	cfg := config{}
	flag.StringVar(&cfg.mode, "mode", "readme", "readme or old")
	flag.IntVar(&cfg.procs, "procs", 6, "processes")
	flag.IntVar(&cfg.offered, "offered", 300, "requests/s offered to the fleet")
	flag.DurationVar(&cfg.dur, "dur", 20*time.Second, "load duration")
	flag.DurationVar(&cfg.killAt, "kill-at", 7*time.Second, "when Redis is killed")
	flag.DurationVar(&cfg.down, "down", 5*time.Second, "how long Redis stays down")
	flag.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "wait after the processes listen, so the fleet counts them all")
	flag.StringVar(&cfg.fault, "fault", "kill", "kill (Redis restarted empty after -down) or stop (SIGSTOPped for -down, then resumed)")
	flag.BoolVar(&cfg.verbose, "v", false, "pass the services' logs through")
	flag.Parse()
	serveIfAsked()
	res, err := drive(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	report(os.Stdout, cfg, res)
}

func report(w io.Writer, cfg config, r result) {
	if cfg.fault == "stop" {
		reportStop(w, cfg, r)
		return
	}
	allowed := capacity + rate*r.elapsed.Seconds() + capacity // Redis restarts empty: a second burst
	fmt.Fprintf(w, "mode %s: %d processes, %d req/s offered for %s: admitted %d (%d while Redis was down %s: bound C + r·T = %.0f), denied %d, failed %d; the limit allows about %.0f in all; ratio %.2f\n",
		cfg.mode, cfg.procs, cfg.offered, r.elapsed.Round(time.Millisecond), r.admitted, r.downAdmitted,
		r.downFor.Round(time.Millisecond), r.bound(), r.denied, r.failed, allowed, float64(r.admitted)/allowed)
}

// reportStop prints what requests waited in each second from the stop on
// (second 0 holds the stop, and the breaker's opening in it).
func reportStop(w io.Writer, cfg config, r result) {
	fmt.Fprintf(w, "mode %s: %d processes, %d req/s offered for %s, Redis SIGSTOPped %s in for %s: admitted %d, denied %d, failed %d\n",
		cfg.mode, cfg.procs, cfg.offered, r.elapsed.Round(time.Millisecond), cfg.killAt, cfg.down, r.admitted, r.denied, r.failed)
	fmt.Fprintln(w, "second from the stop   sent   p99 ms   max ms")
	for i, s := range r.seconds {
		fmt.Fprintf(w, "%20d   %4d   %6.1f   %6.1f\n", i, s.sent, ms(s.p99), ms(s.max))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// bySecond groups the waits of requests sent from the stop on by the
// second they were sent in.
func bySecond(sent []time.Time, waits []time.Duration, from time.Time) []second {
	var groups [][]time.Duration
	for i, at := range sent {
		if at.Before(from) || waits[i] < 0 {
			continue
		}
		k := int(at.Sub(from) / time.Second)
		for len(groups) <= k {
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], waits[i])
	}
	out := make([]second, len(groups))
	for k, g := range groups {
		slices.Sort(g)
		if len(g) == 0 {
			continue
		}
		out[k] = second{sent: len(g), p99: g[(len(g)*99)/100], max: g[len(g)-1]}
	}
	return out
}

// serveEnv, set in a process drive starts for -mode old, holds its port
// and Redis URL: the process serves instead of driving (the test binary
// too, through TestMain).
const serveEnv = "GUARDFLEET_SERVE_OLD"

// serveIfAsked serves -mode old's service and exits when serveEnv says so.
func serveIfAsked() {
	v := os.Getenv(serveEnv)
	if v == "" {
		return
	}
	port, url, _ := strings.Cut(v, " ")
	p, err := strconv.Atoi(port)
	if err == nil {
		err = serveOld(p, url)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveOld is -mode old's service: the former README Redis snippet.
func serveOld(port int, redisURL string) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	p, err := tiers.Load([]byte(oldPolicy))
	if err != nil {
		return err
	}
	client, err := redisstore.NewClient(redisURL)
	if err != nil {
		return err
	}
	store, err := redisstore.New(client)
	if err != nil {
		return err
	}
	guarded, err := fallback.New(store, fallback.WithLogger(logger))
	if err != nil {
		return err
	}
	limits, err := tiers.NewLimiter(guarded, p)
	if err != nil {
		return err
	}
	fg, err := interceptor.New(interceptor.WithRoute(func(r *http.Request) string { return r.Method + " " + r.URL.Path }))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fg.HTTP(floodgate.Chain{limits})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	guarded.Close(ctx)
	store.Close()
	return client.Close()
}

// readmeBlocks returns the README's first screen: its policy.yaml (the
// first yaml block) and its HTTP service (the first go block).
func readmeBlocks(readme string) (policy, service string, err error) {
	_, screen, ok := strings.Cut(readme, "## Protect a service\n")
	if !ok {
		return "", "", errors.New("README.md has no \"## Protect a service\" section")
	}
	screen, _, _ = strings.Cut(screen, "\n## ")
	block := func(lang string) (string, error) {
		_, rest, ok := strings.Cut(screen, "```"+lang+"\n")
		if !ok {
			return "", fmt.Errorf("the first screen has no %s block", lang)
		}
		body, _, ok := strings.Cut(rest, "```\n")
		if !ok {
			return "", fmt.Errorf("the first screen's %s block is not closed", lang)
		}
		return body, nil
	}
	if policy, err = block("yaml"); err != nil {
		return "", "", err
	}
	if service, err = block("go"); err != nil {
		return "", "", err
	}
	return policy, service, nil
}

// repoRoot finds the checkout: the nearest directory above the working
// directory whose go.mod is the root module's.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/floodgate-go/floodgate\n") {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no checkout of github.com/floodgate-go/floodgate above the working directory")
		}
		dir = up
	}
}

// buildReadme writes the README's policy.yaml and HTTP service into a
// fresh module in a new temporary directory and builds it there; it
// returns the directory and the binary.
func buildReadme() (dir, bin string, err error) {
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return "", "", err
	}
	policy, service, err := readmeBlocks(string(readme))
	if err != nil {
		return "", "", err
	}
	dir, err = os.MkdirTemp("", "fg-readme-service-")
	if err != nil {
		return "", "", err
	}
	gomod := "module example.com/shop\n\ngo 1.26\n\nrequire github.com/floodgate-go/floodgate v0.0.0\n\nreplace github.com/floodgate-go/floodgate => " + root + "\n"
	for name, body := range map[string]string{"go.mod": gomod, "policy.yaml": policy, "main.go": service} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			return "", "", err
		}
	}
	bin = filepath.Join(dir, "shop-http")
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", bin, "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, out)
		}
	}
	return dir, bin, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until 127.0.0.1:port accepts, for at most limit.
func waitListening(port int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("127.0.0.1:%d not listening within %s: %w", port, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisServer is the run's redis-server, killed and restarted empty.
type redisServer struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func (r *redisServer) start() error {
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	return waitListening(r.port, 10*time.Second)
}

// pause stops (SIGSTOP) or resumes (SIGCONT) the server.
func (r *redisServer) pause(stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	r.cmd.Process.Signal(sig)
}

func (r *redisServer) kill() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// drive runs the fleet and the load and returns what it measured.
func drive(cfg config) (res result, err error) {
	var start func(port int, redisURL string) *exec.Cmd
	path := "/"
	switch cfg.mode {
	case "readme":
		dir, bin, err := buildReadme()
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
		start = func(port int, redisURL string) *exec.Cmd {
			c := exec.Command(bin)
			c.Dir = dir
			c.Env = append(os.Environ(), "ADDR=127.0.0.1:"+strconv.Itoa(port), "REDIS_URL="+redisURL)
			return c
		}
		path = "/v1/items/7"
	case "old":
		self, err := os.Executable()
		if err != nil {
			return res, err
		}
		start = func(port int, redisURL string) *exec.Cmd {
			c := exec.Command(self)
			c.Env = append(os.Environ(), serveEnv+"="+strconv.Itoa(port)+" "+redisURL)
			return c
		}
	default:
		return res, fmt.Errorf("-mode %q: want readme or old", cfg.mode)
	}
	if cfg.fault != "" && cfg.fault != "kill" && cfg.fault != "stop" {
		return res, fmt.Errorf("-fault %q: want kill or stop", cfg.fault)
	}
	rport, err := freePort()
	if err != nil {
		return res, err
	}
	rdir, err := os.MkdirTemp("", "guardfleet-redis-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(rdir)
	redis := &redisServer{port: rport, dir: rdir}
	if err := redis.start(); err != nil {
		return res, err
	}
	defer func() { redis.kill() }()
	url := "redis://127.0.0.1:" + strconv.Itoa(rport)

	var ports []int
	var procs []*exec.Cmd
	defer func() {
		for _, c := range procs {
			c.Process.Signal(syscall.SIGTERM)
			c.Wait()
		}
	}()
	for range cfg.procs {
		p, err := freePort()
		if err != nil {
			return res, err
		}
		c := start(p, url)
		if cfg.verbose {
			c.Stderr = os.Stderr
		}
		if err := c.Start(); err != nil {
			return res, err
		}
		ports, procs = append(ports, p), append(procs, c)
	}
	for _, p := range ports {
		if err := waitListening(p, 30*time.Second); err != nil {
			return res, err
		}
	}
	time.Sleep(cfg.warmup)
	return load(cfg, ports, path, redis)
}

// load offers cfg.offered requests/s round robin for cfg.dur, killing
// Redis cfg.killAt in for cfg.down.
func load(cfg config, ports []int, path string, redis *redisServer) (res result, err error) {
	var admitted, denied, failed, downAdmitted atomic.Int64
	var down atomic.Bool
	client := &http.Client{Timeout: 2 * time.Second}
	start := time.Now()
	outage := make(chan error, 1)
	n := cfg.offered * int(cfg.dur/time.Second+1)
	sent, waits := make([]time.Time, n), make([]time.Duration, n)
	var killed time.Time
	go func() {
		time.Sleep(cfg.killAt)
		if cfg.fault == "stop" {
			redis.pause(true)
		} else {
			redis.kill()
		}
		down.Store(true)
		killed = time.Now()
		time.Sleep(cfg.down)
		down.Store(false)
		res.downFor = time.Since(killed)
		if cfg.fault == "stop" {
			redis.pause(false)
			outage <- nil
			return
		}
		outage <- redis.start()
	}()
	tick := time.NewTicker(time.Second / time.Duration(cfg.offered))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; time.Since(start) < cfg.dur && i < n; i++ {
		<-tick.C
		port := ports[i%len(ports)]
		wg.Add(1)
		waits[i] = -1
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+path, nil)
			req.Header.Set("x-user-id", "u1")
			t0 := time.Now()
			resp, err := client.Do(req)
			sent[i], waits[i] = t0, time.Since(t0)
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				admitted.Add(1)
				if down.Load() {
					downAdmitted.Add(1)
				}
			case http.StatusTooManyRequests:
				denied.Add(1)
			default:
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if err := <-outage; err != nil {
		return res, err
	}
	res.admitted, res.denied, res.failed, res.downAdmitted = admitted.Load(), denied.Load(), failed.Load(), downAdmitted.Load()
	if cfg.fault == "stop" {
		res.seconds = bySecond(sent, waits, killed)
	}
	return res, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/rls/translate"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// RatelimitVersion is the envoyproxy/ratelimit version measured: its
// service_cmd, built from the Go module proxy as pkg@version (its go.mod
// has no replace directives, so pkg@version builds exactly its own
// dependency set).
const RatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// contender is one rate limit service under load.
type contender struct {
	name string
	addr string // gRPC address
	pid  int    // the server process, 0 when in this process
	stop func()
	// restart, when set, starts the process again on the same address
	// (setting pid and stop): a contender that defers Redis work (async
	// reports) is stopped after each measured phase, so that what it
	// deferred reaches Redis, and counts in its row, before Redis's CPU
	// is read, and none of it lands in another row's phase.
	restart func() error
	down    bool // stopped after its last phase, to restart before its next
}

// freePort returns a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// goRun returns the executable `go run` builds for pkg (a package of the
// module in dir, or pkg@version), from the go build cache: since Go 1.24
// `go run` caches the executables it links there, so the first call builds
// it (each package compiled once, then found in the cache by every later
// build), and later calls, in this run or any other, find it. It is built
// the way `go vet` and staticcheck compile (the environment's settings,
// without -race), so on a cold machine the standard library and the
// shared modules are compiled for it once, not once more in a
// configuration of its own. -exec echo makes `go run` print the
// executable's path instead of running it; the path of the run that
// built it is a temporary one, gone when go exits, so that case asks
// again, and the second answer is in the cache.
func goRun(dir, pkg string) (string, error) {
	builtMu.Lock()
	defer builtMu.Unlock()
	if bin, ok := built[dir+" "+pkg]; ok {
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	for range 2 {
		cmd := exec.Command("go", "run", "-exec", "echo", pkg)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("go run -exec echo %s: %w\n%s", pkg, err, stderr.String())
		}
		lines := strings.Fields(string(out))
		if len(lines) == 0 {
			return "", fmt.Errorf("go run -exec echo %s printed no path", pkg)
		}
		bin := lines[len(lines)-1]
		if _, err := os.Stat(bin); err == nil {
			built[dir+" "+pkg] = bin
			return bin, nil
		}
	}
	return "", fmt.Errorf("go run -exec echo %s: the executable is not kept in the build cache (GOCACHE=off?)", pkg)
}

// built remembers goRun's answers in this process (the tests ask for the
// same executables several times; each go run costs a second or more of
// the go command's checks).
var (
	builtMu sync.Mutex
	built   = map[string]string{}
)

// buildFloodgate returns the floodgate-rls command of this module's
// requirement (the repository's rls module, through its replace
// directive), built in that module with its own go.mod (goRun).
func buildFloodgate() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/floodgate-go/floodgate/rls").Output()
	if err != nil {
		return "", fmt.Errorf("finding the rls module (run from bench/rls): %w", err)
	}
	return goRun(strings.TrimSpace(string(out)), "./cmd/floodgate-rls")
}

// buildFloor returns this module's rls-floor command (goRun).
func buildFloor() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("finding the bench/rls module (run from bench/rls): %w", err)
	}
	return goRun(strings.TrimSpace(string(out)), "./cmd/rls-floor")
}

// startFloor runs rls-floor: the same gRPC service answering OK without
// deciding (no Redis), the floor under every contender's server CPU.
func startFloor(bin string, log io.Writer) (*contender, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd, stop, err := startProcess(bin, []string{"-listen", addr}, nil, log)
	if err != nil {
		return nil, err
	}
	return &contender{name: "grpc-floor", addr: addr, pid: cmd.Process.Pid, stop: stop}, nil
}

// buildRatelimit returns envoyproxy/ratelimit's service_cmd, built from
// the Go module proxy by goRun (once; later runs find it in the go build
// cache).
func buildRatelimit(log io.Writer) (string, error) {
	pkg := "github.com/envoyproxy/ratelimit/src/service_cmd@" + RatelimitVersion
	tmp, err := os.MkdirTemp("", "ratelimit-build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	bin, err := goRun(tmp, pkg)
	if err != nil {
		return "", err
	}
	if d := time.Since(start); d > 10*time.Second {
		fmt.Fprintf(log, "built envoyproxy/ratelimit %s in %s (go run, cached in the go build cache)\n", RatelimitVersion, d.Round(time.Second))
	}
	return bin, nil
}

// startProcess starts bin with args and env, logging to log, and returns
// a function that stops it (SIGTERM, then SIGKILL after 10 seconds).
func startProcess(bin string, args, env []string, log io.Writer) (*exec.Cmd, func(), error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the benchmark
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	return cmd, stop, nil
}

// startFloodgate runs floodgate-rls serve-rls on redisAddr with the
// translation of envoyConfig in consistency ("" exact: the same fixed
// windows as envoyproxy/ratelimit, decided in Redis; "async": token
// buckets decided locally), with its rate limit response headers or
// without them (-headers=false).
func startFloodgate(bin, work, redisAddr, consistency string, headers bool, log io.Writer) (*contender, error) {
	policy, err := translate.Translate([]translate.File{{Name: "bench.yaml", Data: []byte(envoyConfig)}}, translate.Options{As: translateAs, Consistency: consistency})
	if err != nil {
		return nil, err
	}
	name := "floodgate-rls"
	if consistency != "" {
		name += "-" + consistency
	}
	path := filepath.Join(work, name+"-policy.yaml")
	if err := os.WriteFile(path, policy, 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := &contender{name: name, addr: addr}
	start := func() error {
		args := []string{"serve-rls", "-policy", path, "-listen", addr, "-redis", "redis://" + redisAddr, "-watch", "0", "-store-timeout", "1s", "-headers=" + strconv.FormatBool(headers)}
		cmd, stop, err := startProcess(bin, args, nil, log)
		if err != nil {
			return err
		}
		c.pid, c.stop = cmd.Process.Pid, stop
		return nil
	}
	if err := start(); err != nil {
		return nil, err
	}
	if consistency == "async" {
		c.restart = start
	}
	return c, nil
}

// startRatelimit runs envoyproxy/ratelimit on redisAddr with envoyConfig,
// with its defaults or, tuned, with REDIS_PIPELINE_WINDOW=window (its
// documented throughput setting: radix buffers concurrent writes and
// flushes them together) and REDIS_POOL_SIZE=pool (default 10); with
// headers, it adds its RateLimit-Limit, -Remaining and -Reset response
// headers (LIMIT_RESPONSE_HEADERS_ENABLED=true; off by default).
func startRatelimit(bin, work, redisAddr string, tuned bool, window time.Duration, pool int, headers bool, log io.Writer) (*contender, error) {
	name := "envoyproxy-ratelimit"
	sub := "ratelimit"
	if tuned {
		name += "-tuned"
		sub += "-tuned"
	}
	cfgDir := filepath.Join(work, sub, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(envoyConfig), 0o644); err != nil {
		return nil, err
	}
	var env []string
	if headers {
		env = append(env, "LIMIT_RESPONSE_HEADERS_ENABLED=true")
	}
	if tuned {
		env = append(env, "REDIS_PIPELINE_WINDOW="+window.String(), "REDIS_POOL_SIZE="+strconv.Itoa(pool))
	}
	c, err := startRatelimitDir(bin, work, sub, redisAddr, env, log)
	if err != nil {
		return nil, err
	}
	c.name = name
	return c, nil
}

// startRatelimitDir runs envoyproxy/ratelimit on redisAddr with the
// configuration files in work/sub/config, on loopback ports, with its
// defaults and extra environment settings.
func startRatelimitDir(bin, work, sub, redisAddr string, extra []string, log io.Writer) (*contender, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	env := []string{
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + work, "RUNTIME_SUBDIRECTORY=" + sub, "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	}
	cmd, stop, err := startProcess(bin, nil, append(env, extra...), log)
	if err != nil {
		return nil, err
	}
	return &contender{name: "envoyproxy-ratelimit", addr: "127.0.0.1:" + strconv.Itoa(ports[1]), pid: cmd.Process.Pid, stop: stop}, nil
}

// startFloodgatePolicy runs floodgate-rls serve-rls on redisAddr with the
// policy file at path, as startFloodgate does (a 1s store budget, no
// watching), named name.
func startFloodgatePolicy(bin, path, name, redisAddr string, headers bool, log io.Writer) (*contender, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"serve-rls", "-policy", path, "-listen", addr, "-redis", "redis://" + redisAddr, "-watch", "0", "-store-timeout", "1s", "-headers=" + strconv.FormatBool(headers)}
	cmd, stop, err := startProcess(bin, args, nil, log)
	if err != nil {
		return nil, err
	}
	return &contender{name: name, addr: addr, pid: cmd.Process.Pid, stop: stop}, nil
}

// startInProcess serves the translated policy from this process with
// package rls over redisstore (for the program's own tests: a build-free
// floodgate contender).
func startInProcess(redisAddr string, headers bool) (*contender, error) {
	policyYAML, err := translate.Translate([]translate.File{{Name: "bench.yaml", Data: []byte(envoyConfig)}}, translate.Options{As: translateAs})
	if err != nil {
		return nil, err
	}
	p, err := tiers.Load(policyYAML)
	if err != nil {
		return nil, err
	}
	client, err := redisstore.NewClient("redis://" + redisAddr)
	if err != nil {
		return nil, err
	}
	rs, err := redisstore.New(client)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	// As floodgate-rls composes it, with the bench's 1s budget.
	fb, err := fallback.New(rs, fallback.WithTimeout(time.Second))
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	l, err := tiers.NewLimiter(fb, p)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	srv, err := rls.New(l, rls.WithResponseHeaders(headers))
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis); close(served) }()
	return &contender{name: "floodgate-inprocess", addr: lis.Addr().String(), stop: func() {
		cancel()
		<-served
		_ = rs.Close()
		_ = client.Close()
	}}, nil
}

// waitReady waits until c answers a call with OK, for at most 60 seconds
// (envoyproxy/ratelimit loads its configuration after it listens).
func waitReady(c *contender, probe *rlsv3.RateLimitRequest) error {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := client.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK && resp.Statuses[0].CurrentLimit != nil {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("answer %v", resp)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s at %s not ready in 60s: %w", c.name, c.addr, last)
}

// health checks the floodgate contender's health service (the same
// check a load balancer makes).
func health(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil {
		return err
	}
	if res.Status != healthpb.HealthCheckResponse_SERVING {
		return errors.New("not serving")
	}
	return nil
}

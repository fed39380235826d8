// Command guardfleet runs six copies of an HTTP service on one
// redis-server of its own (a free loopback port), offers them 300
// requests/s round robin for 20 s under one rule of 50/s burst 50, kills
// Redis 7 s in and starts it again (empty) 5 s later, and prints what the
// fleet admitted against what the limit allows, and how much of it while
// Redis was down (5 s x 50/s = 250 allowed there).
//
// -mode guard wires the service as the README's first screen does
// (package guard: WithRedisURL, WithService, so the fallback's local
// shares follow the live membership); -mode old as the README's Redis
// snippet did before it (fallback.New(store) without WithInstances: each
// process holds the whole limit while Redis is down).
//
//	cd bench && go run ./cmd/guardfleet -mode guard
//	cd bench && go run ./cmd/guardfleet -mode old
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

const policy = `
rules:
  - name: all
    rate: 50/1s
    burst: 50
`

func main() {
	mode := flag.String("mode", "guard", "guard or old")
	role := flag.String("role", "drive", "drive or serve")
	port := flag.Int("port", 0, "serve: port")
	redisURL := flag.String("redis", "", "serve: Redis URL")
	flag.Parse()
	if *role == "serve" {
		if err := serve(*mode, *port, *redisURL); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if err := drive(*mode); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// byPath names each request "METHOD /path": the service has a handful of
// paths and no mux.
var byPath = interceptor.WithRoute(func(r *http.Request) string { return r.Method + " " + r.URL.Path })

func serve(mode string, port int, redisURL string) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	var h http.Handler
	var closeAll func()
	switch mode {
	case "guard":
		g, err := guard.New(context.Background(), guard.WithPolicy([]byte(policy)), guard.WithRedisURL(redisURL),
			guard.WithService("shop"), guard.WithLogger(logger), guard.WithInterceptor(byPath))
		if err != nil {
			return err
		}
		h, closeAll = g.HTTP(ok), func() { g.Close(context.Background()) }
	case "old":
		p, err := tiers.Load([]byte(policy))
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
		fg, err := interceptor.New(byPath)
		if err != nil {
			return err
		}
		h = fg.HTTP(floodgate.Chain{limits})(ok)
		closeAll = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			guarded.Close(ctx)
			store.Close()
			client.Close()
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Close()
	closeAll()
	return nil
}

func freePort() int {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func drive(mode string) error {
	rport := freePort()
	dir, _ := os.MkdirTemp("", "fleet6")
	startRedis := func() *exec.Cmd {
		c := exec.Command("redis-server", "--port", strconv.Itoa(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		c.Start()
		for i := 0; i < 100; i++ {
			if conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(rport)); err == nil {
				conn.Close()
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return c
	}
	redis := startRedis()
	url := "redis://127.0.0.1:" + strconv.Itoa(rport)
	self, _ := os.Executable()
	var ports []int
	var procs []*exec.Cmd
	for range 6 {
		p := freePort()
		c := exec.Command(self, "-role", "serve", "-mode", mode, "-port", strconv.Itoa(p), "-redis", url)
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			return err
		}
		ports, procs = append(ports, p), append(procs, c)
	}
	time.Sleep(3 * time.Second) // every process up and counted by the fleet
	const offered, dur = 300, 20 * time.Second
	var admitted, denied, failed atomic.Int64
	var outAdmitted atomic.Int64
	var down atomic.Bool
	client := &http.Client{Timeout: 2 * time.Second}
	start := time.Now()
	tick := time.NewTicker(time.Second / offered)
	var wg sync.WaitGroup
	go func() {
		time.Sleep(7 * time.Second)
		redis.Process.Kill()
		redis.Wait()
		down.Store(true)
		fmt.Println("redis killed at", time.Since(start).Round(time.Millisecond))
		time.Sleep(5 * time.Second)
		redis = startRedis()
		down.Store(false)
		fmt.Println("redis back at", time.Since(start).Round(time.Millisecond))
	}()
	for i := 0; time.Since(start) < dur; i++ {
		<-tick.C
		p := ports[i%len(ports)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := client.Get("http://127.0.0.1:" + strconv.Itoa(p) + "/")
			if err != nil {
				failed.Add(1)
				return
			}
			res.Body.Close()
			switch res.StatusCode {
			case 200:
				admitted.Add(1)
				if down.Load() {
					outAdmitted.Add(1)
				}
			case 429:
				denied.Add(1)
			default:
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, c := range procs {
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
	}
	redis.Process.Kill()
	redis.Wait()
	// Redis restarts empty: the limit allows a burst at the start, the
	// rate all along, and a burst again when it comes back.
	allowed := 50 + 50*elapsed.Seconds() + 50
	fmt.Printf("mode %s: 6 processes, %d req/s offered for %s: admitted %d (%d while Redis was down, allowed there 5 s x 50/s = 250), denied %d, failed %d; the limit allows about %.0f; ratio %.2f\n",
		mode, offered, elapsed.Round(time.Millisecond), admitted.Load(), outAdmitted.Load(), denied.Load(), failed.Load(), allowed, float64(admitted.Load())/allowed)
	return nil
}

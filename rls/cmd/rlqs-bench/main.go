// Command rlqs-bench measures floodgate-rls's rate limit quota service
// (RLQS) against a fleet of clients that behave as Envoy's
// rate_limit_quota filter does (package rls/internal/rlqsclient), each a
// separate OS process, on one redis-server it starts:
//
//	rlqs-bench [-clients 1,2,4,8] [-servers 1,2] [-duration 40s] [-report 5s]
//	           [-rate 100] [-buckets 4] [-factor 2] [-tick 500ms] [-rls-bin PATH]
//
// For each number of servers (floodgate-rls serve-rls processes sharing
// the redis-server) and of clients, the clients offer together factor
// times the limit (rate per second, a token_bucket rule of capacity one
// second) on each of the shared buckets, evenly paced, for the duration,
// reporting every -report (Envoy reports every 5 s). It prints, summed
// over the buckets, what was admitted against what the limit allows
// (rate × duration + capacity), the over-admission bound of the package
// documentation for the run (allowed + the max_tokens of every token
// bucket that started full + what no_assignment_behavior admitted), and
// the Redis commands the run cost per report and per request.
// floodgate-rls is built from this module unless -rls-bin names it.
// RLQS_BENCH_DEBUG=1 also prints each client's result and the
// redis-server's command statistics on standard error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/rls/internal/rlqsclient"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "client" {
		os.Exit(clientMain(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// clientResult is what a client process prints.
type clientResult struct {
	Offered, Admitted []int64
	Stats             rlqsclient.Stats
}

// clientMain runs one Envoy-like client: for -duration from -start, it
// offers -offer requests a second on each of -buckets buckets.
func clientMain(args []string) int {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "", "floodgate-rls address")
	start := fs.Int64("start", 0, "start, Unix nanoseconds")
	duration := fs.Duration("duration", 40*time.Second, "how long to offer")
	report := fs.Duration("report", rlqsclient.DefaultReportInterval, "report interval")
	offer := fs.Float64("offer", 50, "requests per second offered on each bucket")
	buckets := fs.Int("buckets", 4, "buckets")
	phase := fs.Float64("phase", 0, "fraction of a request interval to start late (spreads the clients)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := rlqsclient.New(ctx, conn, rlqsclient.Config{Domain: "edge", ReportInterval: *report})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	t0 := time.Unix(0, *start)
	end := t0.Add(*duration)
	interval := time.Duration(float64(time.Second) / *offer)
	res := clientResult{Offered: make([]int64, *buckets), Admitted: make([]int64, *buckets)}
	var wg sync.WaitGroup
	for k := range *buckets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := map[string]string{"tenant": "t" + strconv.Itoa(k)}
			at := t0.Add(time.Duration((*phase + float64(k)/float64(*buckets)) * float64(interval)))
			for i := 0; ; i++ {
				next := at.Add(time.Duration(i) * interval)
				if !next.Before(end) {
					return
				}
				time.Sleep(time.Until(next))
				res.Offered[k]++
				if c.Allow(id) {
					res.Admitted[k]++
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // let a report under way finish
	_ = c.Report()                     // the usage since the last report, as Envoy sends it at its next interval
	time.Sleep(200 * time.Millisecond)
	res.Stats = c.Stats()
	c.Close()
	return boolExit(json.NewEncoder(os.Stdout).Encode(res) == nil)
}

func boolExit(ok bool) int {
	if ok {
		return 0
	}
	return 1
}

// config is the coordinator's flags.
type config struct {
	clients, servers       []int
	duration, report, tick time.Duration
	rate, factor           float64
	buckets                int
	rlsBin                 string
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlqs-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	clients := fs.String("clients", "1,2,4,8", "numbers of client processes")
	servers := fs.String("servers", "1,2", "numbers of floodgate-rls processes sharing the redis-server")
	fs.DurationVar(&c.duration, "duration", 40*time.Second, "how long the clients offer (at most 55s: a run stays within a minute)")
	fs.DurationVar(&c.report, "report", rlqsclient.DefaultReportInterval, "the clients' report interval (Envoy: 5s)")
	fs.DurationVar(&c.tick, "tick", 500*time.Millisecond, "floodgate-rls's -rlqs-tick")
	fs.Float64Var(&c.rate, "rate", 100, "the limit, requests per second per bucket (capacity: one second of it)")
	fs.Float64Var(&c.factor, "factor", 2, "the fleet offers factor × the limit")
	fs.IntVar(&c.buckets, "buckets", 4, "shared buckets")
	fs.StringVar(&c.rlsBin, "rls-bin", "", "floodgate-rls binary; empty: go build ./cmd/floodgate-rls")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if c.clients, err = ints(*clients); err == nil {
		c.servers, err = ints(*servers)
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "rlqs-bench: %v\n", err)
		return 2
	case c.duration <= 0 || c.duration > 55*time.Second:
		fmt.Fprintf(stderr, "rlqs-bench: -duration %s: want (0, 55s]\n", c.duration)
		return 2
	case c.rate < 1 || c.factor <= 0 || c.buckets < 1 || c.report < time.Second:
		fmt.Fprintln(stderr, "rlqs-bench: want -rate >= 1, -factor > 0, -buckets >= 1, -report >= 1s")
		return 2
	}
	if c.rlsBin == "" {
		dir, err := os.MkdirTemp("", "rlqs-bench")
		if err != nil {
			fmt.Fprintf(stderr, "rlqs-bench: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		c.rlsBin = dir + "/floodgate-rls"
		build := exec.Command("go", "build", "-o", c.rlsBin, "./cmd/floodgate-rls")
		build.Stderr = stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(stderr, "rlqs-bench: building floodgate-rls (run from the rls module): %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "%d buckets, limit %g/s each (capacity %g), the fleet offering %g×, reports every %s, %s runs, floodgate-rls -rlqs-tick %s\n\n",
		c.buckets, c.rate, c.rate, c.factor, c.report, c.duration, c.tick)
	fmt.Fprintln(stdout, "| servers | clients | offered | admitted | allowed | over (+) / under (-) | bound | within bound | Redis calls | reports | calls/report | calls/request |")
	fmt.Fprintln(stdout, "|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|")
	failed := false
	for _, s := range c.servers {
		for _, n := range c.clients {
			r, err := runOne(c, s, n, stderr)
			if err != nil {
				fmt.Fprintf(stderr, "rlqs-bench: %d servers, %d clients: %v\n", s, n, err)
				failed = true
				continue
			}
			fmt.Fprintln(stdout, r.row(s, n))
		}
	}
	if failed {
		return 1
	}
	return 0
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 16 {
			return nil, fmt.Errorf("%q: want numbers from 1 to 16, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// Command takecount counts the instructions Redis spends on one take of
// floodgate's Redis store, for comparing builds of take.lua: a count does
// not move with the machine's other load, where Redis's CPU time does.
//
// It drives a redis-server running under valgrind's callgrind with the
// store's batched takes of -levels token buckets each (rate and burst so
// large that every take is charged), from 4 x -batch callers into one
// flusher of at most -batch takes a call: callgrind slows Redis fifty
// times, so nearly every call is full. After a warm-up of 3 x -batch x
// 20 takes (every key present), it zeroes callgrind's counters
// (callgrind_control -z), makes -n takes, dumps the counters
// (callgrind_control -d) and prints the dump's total over -n:
//
//	valgrind --tool=callgrind --callgrind-out-file=/tmp/rcg.out \
//	  redis-server --port 7802 --save "" --appendonly no &
//	go run ./cmd/takecount -addr 127.0.0.1:7802 -pid $(pgrep -f 'redis-server.*7802') -out /tmp/rcg.out
//
// Each run's keys carry a prefix of their own (-prefix, default from the
// time), so runs of two builds can alternate on one redis-server: counts
// of one redis-server process repeat within about 1k instructions a take,
// where two processes can differ by more. With -pid 0 it makes the takes
// and counts nothing (its test).
//
// What this program decides: the takes, the batching and the count; the
// script is the store's own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

func main() {
	if err := run(context.Background(), os.Args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "takecount:", err)
		os.Exit(1)
	}
}

type config struct {
	addr, out, prefix string
	pid, n, levels    int
	batch             int
}

func parseFlags(args []string, w io.Writer) (config, error) {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(w)
	var c config
	fs.StringVar(&c.addr, "addr", "127.0.0.1:7802", "the redis-server under callgrind (a loopback address)")
	fs.IntVar(&c.pid, "pid", 0, "its process id, for callgrind_control; 0: count nothing")
	fs.StringVar(&c.out, "out", "/tmp/rcg.out", "its --callgrind-out-file: the dumps are this name with .N after it")
	fs.StringVar(&c.prefix, "prefix", fmt.Sprintf("tc%d:", time.Now().UnixNano()), "key prefix of this run")
	fs.IntVar(&c.n, "n", 2200, "takes counted")
	fs.IntVar(&c.levels, "levels", 4, "token buckets per take (1 to 8)")
	fs.IntVar(&c.batch, "batch", 11, "most takes per call (redisstore.WithBatching)")
	if err := fs.Parse(args[1:]); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case !loopback(c.addr):
		return c, fmt.Errorf("bad flags: -addr %q is not a loopback address", c.addr)
	case c.pid < 0:
		return c, fmt.Errorf("bad flags: -pid %d", c.pid)
	case c.n < 1:
		return c, fmt.Errorf("bad flags: -n %d is not at least 1", c.n)
	case c.levels < 1 || c.levels > 8:
		return c, fmt.Errorf("bad flags: -levels %d is not in [1, 8]", c.levels)
	case c.batch < 1 || c.batch > 64:
		return c, fmt.Errorf("bad flags: -batch %d is not in [1, 64]", c.batch)
	}
	return c, nil
}

// loopback reports whether addr is host:port with a loopback host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func run(ctx context.Context, args []string, w io.Writer) error {
	c, err := parseFlags(args, w)
	if err != nil {
		return err
	}
	client := redis.NewClient(&redis.Options{Addr: c.addr, PoolSize: 4,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute, ContextTimeoutEnabled: true, DialerRetries: 1})
	defer client.Close()
	st, err := redisstore.New(client, redisstore.WithBatching(1, c.batch), redisstore.WithPrefix(c.prefix))
	if err != nil {
		return err
	}
	defer st.Close()
	lim := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1e8, Period: time.Second, Burst: 1e8}
	sets := make([][]quota.Bucket, 20*c.batch)
	for p := range sets {
		for l := range c.levels {
			sets[p] = append(sets[p], quota.Bucket{Key: fmt.Sprintf("u=%d:l%d", p, l), Limit: lim, Cost: 1})
		}
	}
	if err := takes(ctx, st, sets, 4*c.batch, int64(3*len(sets))); err != nil {
		return err
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	if err := control(c.pid, "-z"); err != nil {
		return err
	}
	if err := takes(ctx, st, sets, 4*c.batch, int64(c.n)); err != nil {
		return err
	}
	if err := control(c.pid, "-d"); err != nil {
		return err
	}
	calls, err := evalshaCalls(ctx, client)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "takes %d of %d token buckets in %d EVALSHA (%.1f a call)\n", c.n, c.levels, calls, float64(c.n)/float64(max(calls, 1)))
	if c.pid == 0 {
		return nil
	}
	total, file, err := lastTotal(c.out)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "instructions per take %d (%d in %s)\n", total/int64(c.n), total, file)
	return nil
}

// takes makes count takes from callers goroutines, each charged.
func takes(ctx context.Context, st *redisstore.Store, sets [][]quota.Bucket, callers int, count int64) error {
	var next atomic.Int64
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			res := make([]quota.Result, len(sets[0]))
			for i := g; next.Add(1) <= count; i += callers {
				ok, err := st.Take(ctx, sets[i%len(sets)], res)
				if err == nil && !ok {
					err = errors.New("a take was denied: the limits are meant to allow every take")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func control(pid int, op string) error {
	if pid == 0 {
		return nil
	}
	if out, err := exec.Command("callgrind_control", op, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s %d: %v: %s", op, pid, err, out)
	}
	return nil
}

func evalshaCalls(ctx context.Context, c *redis.Client) (int, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(info, "cmdstat_evalsha:calls=")
	if !ok {
		return 0, nil
	}
	n, _, _ := strings.Cut(rest, ",")
	return strconv.Atoi(n)
}

// lastTotal reads the total of the newest dump of out (out.1, out.2, ...).
func lastTotal(out string) (int64, string, error) {
	files, err := filepath.Glob(out + ".*")
	if err != nil || len(files) == 0 {
		return 0, "", fmt.Errorf("no callgrind dump %s.N: %v", out, err)
	}
	newest, seq := "", -1
	for _, f := range files {
		if n, err := strconv.Atoi(strings.TrimPrefix(f, out+".")); err == nil && n > seq {
			newest, seq = f, n
		}
	}
	data, err := os.ReadFile(newest)
	if err != nil {
		return 0, "", err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, newest, err
		}
	}
	return 0, "", fmt.Errorf("%s has no summary line", newest)
}

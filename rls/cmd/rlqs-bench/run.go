package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// result is one run's totals over the buckets.
type result struct {
	offered, admitted, allowed, bound int64
	cmds, reports                     int64
}

func (r result) row(servers, clients int) string {
	over := float64(r.admitted-r.allowed) / float64(r.allowed) * 100
	within := "yes"
	if r.admitted > r.bound {
		within = "**no**"
	}
	return fmt.Sprintf("| %d | %d | %d | %d | %d | %+.2f %% | %d | %s | %d | %d | %.1f | %.4f |",
		servers, clients, r.offered, r.admitted, r.allowed, over, r.bound, within,
		r.cmds, r.reports, float64(r.cmds)/float64(max(r.reports, 1)), float64(r.cmds)/float64(max(r.offered, 1)))
}

const policyYAML = `rules:
  - {name: per-tenant, key: [tenant], rate: %d/1s, algorithm: token_bucket}
rls:
  - domain: edge
    quota: true
    descriptors:
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
`

// runOne runs one fleet of clients against servers floodgate-rls
// processes on a fresh redis-server.
func runOne(c config, servers, clients int, stderr io.Writer) (result, error) {
	raddr, stopRedis, err := redistest.StartProcess()
	if err != nil {
		return result{}, err
	}
	defer stopRedis()
	dir, err := os.MkdirTemp("", "rlqs-bench-run")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, fmt.Appendf(nil, policyYAML, int(c.rate)), 0o644); err != nil {
		return result{}, err
	}
	addrs := make([]string, servers)
	for i := range servers {
		addr, stop, err := startServer(c, policy, raddr, stderr)
		if err != nil {
			return result{}, err
		}
		defer stop()
		addrs[i] = addr
	}
	rc := redis.NewClient(&redis.Options{Addr: raddr})
	defer rc.Close()
	before, err := commands(rc)
	if err != nil {
		return result{}, err
	}
	start := time.Now().Add(2 * time.Second) // the processes start meanwhile
	offer := c.factor * c.rate / float64(clients)
	procs := make([]*exec.Cmd, clients)
	outs := make([]*bytes.Buffer, clients)
	for i := range clients {
		self, err := os.Executable()
		if err != nil {
			return result{}, err
		}
		cmd := exec.Command(self, "client", "-addr", addrs[i%servers], "-start", strconv.FormatInt(start.UnixNano(), 10),
			"-duration", c.duration.String(), "-report", c.report.String(), "-offer", strconv.FormatFloat(offer, 'g', -1, 64),
			"-buckets", strconv.Itoa(c.buckets), "-phase", strconv.FormatFloat(float64(i)/float64(clients), 'g', -1, 64))
		outs[i] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], stderr
		if err := cmd.Start(); err != nil {
			return result{}, err
		}
		procs[i] = cmd
	}
	var r result
	for i, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			return result{}, fmt.Errorf("client %d: %w", i, err)
		}
		var cr clientResult
		if err := json.Unmarshal(outs[i].Bytes(), &cr); err != nil {
			return result{}, fmt.Errorf("client %d: %w", i, err)
		}
		for k := range cr.Offered {
			r.offered += cr.Offered[k]
			r.admitted += cr.Admitted[k]
		}
		if os.Getenv("RLQS_BENCH_DEBUG") != "" {
			fmt.Fprintf(stderr, "client %d: %s\n", i, outs[i].Bytes())
		}
		r.reports += int64(cr.Stats.Reports)
		r.bound += int64(cr.Stats.Fresh + cr.Stats.Unassigned + cr.Stats.Expired)
	}
	after, err := commands(rc)
	if err != nil {
		return result{}, err
	}
	r.cmds = after - before
	r.allowed = int64(c.buckets) * int64(c.rate*c.duration.Seconds()+c.rate)
	r.bound += int64(c.buckets) * int64(c.rate*c.duration.Seconds()) // r·t + Σ max_tokens + U + F
	return r, nil
}

// commands is what the redis-server was called: the calls of scripts
// (EVALSHA, EVAL: the round trips' units of floodgate-rls's stores and
// board) and every other command a client sent, not the commands the
// scripts ran. INFO itself is left out.
func commands(rc *redis.Client) (int64, error) {
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, err
	}
	if os.Getenv("RLQS_BENCH_DEBUG") != "" {
		fmt.Fprint(os.Stderr, info)
	}
	inScripts := map[string]bool{"time": true, "hset": true, "hget": true, "hgetall": true, "hdel": true, "hmget": true,
		"pexpire": true, "get": true, "set": true, "del": true, "incrby": true, "pttl": true, "exists": true, "hincrby": true, "hsetnx": true}
	n := int64(0)
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if inScripts[name] || name == "info" {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// startServer starts a floodgate-rls serve-rls process and waits until it
// serves.
func startServer(c config, policy, raddr string, stderr io.Writer) (string, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	cmd := exec.Command(c.rlsBin, "serve-rls", "-policy", policy, "-listen", addr, "-redis", "redis://"+raddr,
		"-watch", "0", "-rlqs-tick", c.tick.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled && strings.Contains(sc.Text(), "rate_limit_quota") {
				ready <- true
				signalled = true
			}
		}
		if !signalled {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if ok {
			return addr, stop, nil
		}
	case <-time.After(15 * time.Second):
	}
	stop()
	return "", nil, fmt.Errorf("floodgate-rls did not start serving RLQS on %s", addr)
}

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStats is what the benchmark reads from the redis-server: its CPU
// time (INFO cpu: used_cpu_user + used_cpu_sys) and the commands it has
// run (INFO commandstats, every command's calls).
type redisStats struct {
	cpu   time.Duration
	calls int64
	byCmd map[string]int64
}

func readRedis(ctx context.Context, c *redis.Client) (redisStats, error) {
	st := redisStats{byCmd: map[string]int64{}}
	info, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "used_cpu_user:"), strings.HasPrefix(line, "used_cpu_sys:"):
			_, v, _ := strings.Cut(line, ":")
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return st, fmt.Errorf("INFO cpu %q: %w", line, err)
			}
			st.cpu += time.Duration(sec * float64(time.Second))
		case strings.HasPrefix(line, "cmdstat_"):
			// cmdstat_evalsha:calls=12,usec=34,...
			_, rest, _ := strings.Cut(line, ":calls=")
			n, _, _ := strings.Cut(rest, ",")
			calls, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return st, fmt.Errorf("INFO commandstats %q: %w", line, err)
			}
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			if name != "info" && name != "flushall" {
				st.calls += calls
				st.byCmd[name] = calls
			}
		}
	}
	return st, nil
}

// processCPU returns the user + system CPU time of process pid so far,
// from /proc (Linux); ok is false where it cannot be read.
func processCPU(pid int) (time.Duration, bool) {
	if pid == 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields 14 and 15 (utime, stime) count from after its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck, true
}

// loadAvg returns /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

// stealTicks returns the machine's total and steal CPU ticks so far
// (/proc/stat): the share of time the hypervisor gave to other guests.
func stealTicks() (total, steal int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i == 7 {
			steal = n
		}
	}
	return total, steal, true
}

package harness

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one measured contender.
type Row struct {
	// Name is the contender's name as -only accepts it.
	Name string
	// Stats is its measured phase.
	Stats Stats
}

// Table renders rows as one aligned text table.
type Table struct {
	// OpsUnit names an operation in the throughput column: "decisions" or
	// "RPC".
	OpsUnit string
	// Baseline names the row the last column compares throughput with;
	// empty or absent leaves the column out.
	Baseline string
	// Redis adds the columns that only make sense when Redis is involved.
	Redis bool
}

// Write writes the table to w.
func (t Table) Write(w io.Writer, rows []Row) error {
	var base, baseCPU float64
	for _, r := range rows {
		if r.Name == t.Baseline {
			base = r.Stats.PerSecond()
			baseCPU = totalCPU(r.Stats)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	rounds := false
	for _, r := range rows {
		rounds = rounds || r.Stats.Rounds > 1
	}
	head := []string{"contender", t.OpsUnit + "/s"}
	if rounds {
		head = append(head, "best round/s")
	}
	head = append(head, "p50 ms", "p99 ms", "max ms", "allocs/op", "CPU µs/op")
	if t.Redis {
		head = append(head, "RT/op", "cmds/op", "writes/op", "redis CPU µs/op")
	}
	head = append(head, "allowed %", "errors")
	if base > 0 {
		head = append(head, "x "+t.Baseline)
	}
	if baseCPU > 0 {
		head = append(head, "CPU x "+t.Baseline)
	}
	width := len(head[0])
	for _, r := range rows {
		width = max(width, len(r.Name))
	}
	pad := func(s string) string { return s + strings.Repeat(" ", width-len(s)) }
	head[0] = pad(head[0])
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		s := r.Stats
		cols := []string{
			pad(r.Name),
			strconv.FormatFloat(s.PerSecond(), 'f', 0, 64),
		}
		if rounds {
			cols = append(cols, strconv.FormatFloat(s.Best, 'f', 0, 64))
		}
		cols = append(cols,
			ms(s.Latency.Quantile(0.50)),
			ms(s.Latency.Quantile(0.99)),
			ms(s.Latency.Max()),
			strconv.FormatFloat(s.Per(float64(s.Mallocs)), 'f', 1, 64),
			cpu(s.CPUKnown, s.Per(float64(s.CPU)/float64(time.Microsecond))),
		)
		if t.Redis {
			cols = append(cols,
				strconv.FormatFloat(s.Per(float64(s.RoundTrips)), 'f', 3, 64),
				strconv.FormatFloat(s.Per(float64(s.Commands)), 'f', 3, 64),
				strconv.FormatFloat(s.Per(float64(s.Writes)), 'f', 3, 64),
				cpu(s.RedisCPUKnown, s.Per(float64(s.RedisCPU)/float64(time.Microsecond))),
			)
		}
		cols = append(cols,
			strconv.FormatFloat(100*s.Per(float64(s.Allowed)), 'f', 1, 64),
			strconv.FormatUint(s.Errors, 10),
		)
		if base > 0 {
			cols = append(cols, strconv.FormatFloat(s.PerSecond()/base, 'f', 2, 64)+"x")
		}
		if baseCPU > 0 {
			if c := totalCPU(s); c > 0 {
				cols = append(cols, strconv.FormatFloat(baseCPU/c, 'f', 2, 64)+"x")
			} else {
				cols = append(cols, "n/a")
			}
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		s := r.Stats
		if len(s.RedisNodeCPU) < 2 || s.RedisCPU <= 0 {
			continue
		}
		per := make([]string, len(s.RedisNodeCPU))
		share := make([]string, len(s.RedisNodeCPU))
		for i, v := range s.RedisNodeCPU {
			per[i] = strconv.FormatFloat(s.Per(float64(v)/float64(time.Microsecond)), 'f', 1, 64)
			share[i] = strconv.FormatFloat(100*float64(v)/float64(s.RedisCPU), 'f', 1, 64) + "%"
		}
		fmt.Fprintf(w, "%s: redis CPU µs/op per node %s (shares %s)\n", r.Name, strings.Join(per, " / "), strings.Join(share, " / "))
	}
	for _, r := range rows {
		if r.Stats.FirstErr != nil {
			fmt.Fprintf(w, "%s: %d errors, first: %v\n", r.Name, r.Stats.Errors, r.Stats.FirstErr)
		}
	}
	return nil
}

// totalCPU returns the CPU time per operation of the process and, when
// known, of the Redis server, in µs: what one operation costs the machine.
// It is 0 when the process's CPU is unknown, or when the contender used
// Redis (round trips) and Redis's CPU is unknown.
//
// The "CPU x" column divides the baseline's totalCPU by a row's: the
// throughput ratio the row would have if every contender kept the same
// cores busy all the time. It moves less with a noisy machine than the
// throughput ratio, since time the machine gave to others is not CPU time
// of the process or of Redis; where the throughput ratio is below it, the
// row lost throughput to waiting (cores idle), not to work.
func totalCPU(s Stats) float64 {
	if !s.CPUKnown || s.Ops == 0 {
		return 0
	}
	c := s.Per(float64(s.CPU) / float64(time.Microsecond))
	if s.RedisCPUKnown {
		c += s.Per(float64(s.RedisCPU) / float64(time.Microsecond))
	} else if s.RoundTrips > 0 {
		return 0
	}
	return c
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func cpu(known bool, v float64) string {
	if !known {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

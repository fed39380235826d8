package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// child is a running service process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	addr  string
}

// startChild starts the service with cfg in a process of its own running
// procs goroutines at once (GOMAXPROCS), and waits for its address.
func startChild(ctx context.Context, cfg serverConfig, procs int) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, serveFlag, "-config", string(js))
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(procs))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	c.out.Buffer(make([]byte, 0, 64<<10), 16<<20)
	if !c.out.Scan() || !strings.HasPrefix(c.out.Text(), "ADDR ") {
		_ = stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("overload: the service printed no ADDR line (got %q)", c.out.Text())
	}
	c.addr = strings.TrimPrefix(c.out.Text(), "ADDR ")
	return c, nil
}

// stop closes the service's stdin, reads its stats and waits for it,
// for at most 10s.
func (c *child) stop() (serverStats, error) {
	_ = c.stdin.Close()
	var st serverStats
	got := make(chan error, 1)
	go func() {
		for c.out.Scan() {
			if js, ok := strings.CutPrefix(c.out.Text(), "STATS "); ok {
				got <- json.Unmarshal([]byte(js), &st)
				return
			}
		}
		got <- fmt.Errorf("overload: the service ended without stats: %v", c.out.Err())
	}()
	select {
	case err := <-got:
		if werr := c.cmd.Wait(); err == nil && werr != nil {
			err = werr
		}
		return st, err
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return st, fmt.Errorf("overload: the service did not stop within 10s")
	}
}

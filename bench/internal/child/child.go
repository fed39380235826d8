// Package child runs a benchmark's service in a process of its own: the
// program starts its own binary with a flag that makes it serve, hands it
// its configuration as JSON, reads the address it listens on from its
// first line of output ("ADDR host:port") and, when the service's stdin
// closes, its statistics from a line "STATS {json}". Commands overload and
// memload measure services this way, so that the service's CPU and memory
// (GOMAXPROCS, GOMEMLIMIT) are not the load generator's.
//
// What it decides: the protocol between a benchmark and its service
// process, and that a service that does not stop within 10s is killed.
package child

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Child is a running service process.
type Child struct {
	name  string // the program, for errors
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	// Addr is the address the service printed on its ADDR line.
	Addr string
}

// Start runs this program's own binary as "serveFlag -config JSON(cfg)"
// with env added to its environment, and waits for its ADDR line. name
// (the program) begins its errors.
func Start(ctx context.Context, name, serveFlag string, cfg any, env ...string) (*Child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, serveFlag, "-config", string(js))
	cmd.Env = append(os.Environ(), env...)
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
	c := &Child{name: name, cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	c.out.Buffer(make([]byte, 0, 64<<10), 16<<20)
	if !c.out.Scan() || !strings.HasPrefix(c.out.Text(), "ADDR ") {
		_ = stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s: the service printed no ADDR line (got %q)", name, c.out.Text())
	}
	c.Addr = strings.TrimPrefix(c.out.Text(), "ADDR ")
	return c, nil
}

// Stop closes the service's stdin, decodes its STATS line into stats and
// waits for it, for at most 10s (then kills it).
func (c *Child) Stop(stats any) error {
	_ = c.stdin.Close()
	got := make(chan error, 1)
	go func() {
		for c.out.Scan() {
			if js, ok := strings.CutPrefix(c.out.Text(), "STATS "); ok {
				got <- json.Unmarshal([]byte(js), stats)
				return
			}
		}
		got <- fmt.Errorf("%s: the service ended without stats: %v", c.name, c.out.Err())
	}()
	select {
	case err := <-got:
		if werr := c.cmd.Wait(); err == nil && werr != nil {
			err = werr
		}
		return err
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return fmt.Errorf("%s: the service did not stop within 10s", c.name)
	}
}

// ServeIfAsked is the service side's entry: when this process was
// started with serveFlag as its first argument (by Start), it runs serve
// with the arguments after it and exits, with status 1 and the error on
// stderr if serve fails. A command's main calls it first, and its tests'
// TestMain too, since Start runs the test binary.
func ServeIfAsked(serveFlag string, serve func(args []string, stdin io.Reader, stdout io.Writer) error) {
	if len(os.Args) < 2 || os.Args[1] != serveFlag {
		return
	}
	if err := serve(os.Args[2:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Listening tells the parent (Start) the address the service listens on.
func Listening(stdout io.Writer, addr string) {
	fmt.Fprintf(stdout, "ADDR %s\n", addr)
}

// AwaitStop returns when the parent closes the service's stdin (Stop).
func AwaitStop(stdin io.Reader) { _, _ = io.Copy(io.Discard, stdin) }

// Report hands the parent (Stop) the service's statistics.
func Report(stdout io.Writer, stats any) error {
	b, err := json.Marshal(stats)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "STATS %s\n", b)
	return err
}

// Config decodes, in the service, the configuration Start handed it:
// args are those after serveFlag ("-config JSON"), cfg where they go.
// name (the program) begins its errors.
func Config(name string, args []string, cfg any) error {
	fs := flag.NewFlagSet(name+" -serve", flag.ContinueOnError)
	js := fs.String("config", "{}", "the service's configuration, in JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(*js), cfg); err != nil {
		return fmt.Errorf("%s -serve: -config: %w", name, err)
	}
	return nil
}

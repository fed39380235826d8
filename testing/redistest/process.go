package redistest

import (
	"fmt"
	"os/exec"
	"syscall"
)

// StartProcess starts a standalone redis-server as Start does (a free
// 127.0.0.1 port, `--save "" --appendonly no`, a private temporary
// directory, answering PING), for a program that is not a test, such as a
// benchmark's main: it returns the server's address and a function that
// kills and reaps the server and removes its directory, which the caller
// must call, or the reason the server could not start.
func StartProcess(opts ...Option) (addr string, stop func(), err error) {
	p, err := StartProcessHandle(opts...)
	if err != nil {
		return "", nil, err
	}
	return p.Addr(), p.Stop, nil
}

// Process is a standalone redis-server for a program that is not a test
// (a benchmark's main, the floodgate demo), with the faults a test injects
// into a Server: Kill, Pause, Resume and Restart on the same port. Its
// methods return errors instead of failing a test. Stop must be called.
type Process struct{ s *Server }

// StartProcessHandle starts a standalone redis-server as StartProcess does
// and returns a handle that can also kill, pause and restart it.
func StartProcessHandle(opts ...Option) (*Process, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server not found on PATH (%v); run `make deps` to install redis-server and redis-tools", err)
	}
	s := &Server{cfg: cfg, bin: bin}
	if err := s.startFresh(); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return &Process{s: s}, nil
}

// Addr returns the server's address, "127.0.0.1:port"; it stays the same
// across Restart.
func (p *Process) Addr() string { return p.s.Addr() }

// Pid returns the process ID of the running server (a new one after
// Restart), or 0 when it is not running.
func (p *Process) Pid() int {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.cmd == nil || p.s.cmd.Process == nil {
		return 0
	}
	return p.s.cmd.Process.Pid
}

// Kill sends SIGKILL and waits until the server has exited; killing a
// server that is not running does nothing.
func (p *Process) Kill() error { return wrap(p.s.kill()) }

// Pause stops the server with SIGSTOP: connections stay open and commands
// time out, as with a stalled host.
func (p *Process) Pause() error { return wrap(p.s.sendSignal(syscall.SIGSTOP, "SIGSTOP")) }

// Resume continues a server stopped by Pause (SIGCONT).
func (p *Process) Resume() error { return wrap(p.s.sendSignal(syscall.SIGCONT, "SIGCONT")) }

// Restart kills the server if it runs and starts a new one on the same
// port, with empty data and an empty script cache, waiting until it
// answers PING.
func (p *Process) Restart() error { return wrap(p.s.restart()) }

// Stop kills and reaps the server (a paused one too) and removes its
// directory. A second Stop does nothing.
func (p *Process) Stop() { p.s.cleanup() }

func wrap(err error) error {
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

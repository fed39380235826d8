package redistest

import (
	"fmt"
	"os/exec"
)

// StartProcess starts a standalone redis-server as Start does (a free
// 127.0.0.1 port, `--save "" --appendonly no`, a private temporary
// directory, answering PING), for a program that is not a test, such as a
// benchmark's main: it returns the server's address and a function that
// kills and reaps the server and removes its directory, which the caller
// must call, or the reason the server could not start.
func StartProcess(opts ...Option) (addr string, stop func(), err error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return "", nil, err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redistest: redis-server not found on PATH (%v); run `make deps` to install redis-server and redis-tools", err)
	}
	s := &Server{cfg: cfg, bin: bin}
	if err := s.startFresh(); err != nil {
		return "", nil, fmt.Errorf("redistest: %w", err)
	}
	return s.Addr(), s.cleanup, nil
}

// Process is a standalone redis-server for a program that is not a test
// (a benchmark's main), with the fault injection tests get from Server:
// Kill, Pause, Resume and Restart on the same port. StartProcessHandle
// starts one; Stop must be called.
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

// Pid returns the process ID of the running server, or 0 when it is not
// running.
func (p *Process) Pid() int {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.cmd == nil || p.s.cmd.Process == nil {
		return 0
	}
	return p.s.cmd.Process.Pid
}

// Kill sends SIGKILL and waits until the server has exited.
func (p *Process) Kill() error {
	if err := p.s.kill(); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// Restart kills the server if it runs and starts a new one on the same
// port, with empty data, waiting until it answers PING.
func (p *Process) Restart() error {
	if err := p.s.restart(); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// Stop kills and reaps the server and removes its directory.
func (p *Process) Stop() { p.s.cleanup() }

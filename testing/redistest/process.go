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

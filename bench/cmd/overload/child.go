package main

import (
	"context"
	"strconv"

	"github.com/floodgate-go/floodgate/bench/internal/child"
)

// serviceProc is a running service process (package bench/internal/child).
type serviceProc struct{ *child.Child }

// startChild starts the service with cfg in a process of its own running
// procs goroutines at once (GOMAXPROCS), and waits for its address.
func startChild(ctx context.Context, cfg serverConfig, procs int) (serviceProc, error) {
	c, err := child.Start(ctx, "overload", serveFlag, cfg, "GOMAXPROCS="+strconv.Itoa(procs))
	return serviceProc{c}, err
}

// stop closes the service's stdin, reads its stats and waits for it,
// for at most 10s.
func (s serviceProc) stop() (serverStats, error) {
	var st serverStats
	err := s.Stop(&st)
	return st, err
}

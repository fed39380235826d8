//go:build !unix

package main

import (
	"errors"
	"time"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// injector is not available here: stopping a process needs SIGSTOP.
type injector struct {
	err error
}

func startInjector([]*redistest.Process, bool, time.Duration, time.Duration, time.Duration, time.Duration) *injector {
	return &injector{err: errors.New("pausing redis-server needs SIGSTOP (unix only); run with -pause off")}
}

func (*injector) stop() int { return 0 }

package cause

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestIndex(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("redisstore: %w", err) }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, Timeout},
		{wrap(os.ErrDeadlineExceeded), Timeout},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, Refused},
		{wrap(syscall.ECONNRESET), Reset},
		{io.EOF, Reset},
		{errors.New("NOSCRIPT No matching script. Please use EVAL."), NoScript},
		{wrap(errors.New("OOM command not allowed when used memory > 'maxmemory'.")), OOM},
		{errors.New("MOVED 3999 127.0.0.1:6381"), Redirect},
		{errors.New("CLUSTERDOWN The cluster is down"), Redirect},
		{errors.New("ERR something"), Other},
		{errors.New("an OOMPH"), Other},
	} {
		if got := Names[Index(tc.err)]; got != tc.want {
			t.Errorf("Index(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
